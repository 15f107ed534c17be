// Package httpfront serves pyrun's MCP server over HTTP: Streamable HTTP at
// /mcp, the legacy HTTP+SSE transport at /sse (its POST URL is
// /sse?sessionid=...), /healthz and /metrics. Both transports are the
// go-sdk's own handlers; around them httpfront keeps one record per HTTP
// request in flight (exchange: its context, its client, the stream its
// results go out on, its keep-alive writer, its session) and one per MCP
// session a client holds (session: its client and owner, its backlog of
// results, its requests and calls in flight, when it was last used), and
// enforces the front end's limits with them: sessions per client and in
// all, request bytes, results waiting to be written, write deadlines.
//
// The tool handler learns what carried a call from the context: a
// receiving middleware on the SDK server finds the exchange of a Streamable
// HTTP POST by the one header httpfront sets on it (RequestExtra.Header),
// ties the call to the POST and to its session, and puts the POST's stream
// in the call's context (flow.StreamOf).
//
//	h := httpfront.New(httpfront.Backend{SDK: srv, ...}, httpfront.Options{...})
//	server := &http.Server{Handler: h}
//	...
//	h.Drain(); h.WaitAccepted(ctx); ...; h.CloseSessions(ctx)
package httpfront

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// Options configure the HTTP front end. The zero value of each field means
// its default.
type Options struct {
	// Stateless serves /mcp without sessions: every POST is answered on its
	// own, so any replica behind a load balancer can take it.
	Stateless bool
	// SessionTimeout closes a /mcp session after that long without a
	// request from its client, so abandoned sessions are freed. 0: one hour.
	SessionTimeout time.Duration
	// KeepAlive is how often an open event stream (the SSE session, a call's
	// response stream, the standalone GET stream) gets a comment line while
	// nothing else is sent, so that clients and proxies that drop idle
	// streams keep long calls. 0: 15s; negative: never.
	KeepAlive time.Duration
	// Protect wraps the MCP endpoints (/mcp, /sse and the SSE session's POST
	// URL), for access control; /healthz stays open. When it puts an
	// auth.TokenInfo with a UserID in the request's context, sessions are
	// bound to that client: the SDK binds Streamable HTTP sessions, httpfront
	// HTTP+SSE sessions (session.owner). nil: none.
	Protect func(http.Handler) http.Handler
	// ProtectMetrics puts /metrics behind Protect too.
	ProtectMetrics bool
	// Stats reports the pool for /healthz. nil: /healthz is not served.
	Stats func() supervisor.Stats
	// MaxClients bounds the clients /healthz names in workers_by_client
	// (--metrics-max-clients), the first by name; the rest are summed as
	// "other". 0: 32. With Protect, /healthz names none (it stays open):
	// only /metrics does.
	MaxClients int
	// SessionsOpen counts open Python sessions for /healthz. nil: 0.
	SessionsOpen func() int
	// LanguageStats reports each language's pool for /healthz's
	// "languages", and LanguageSessions its open sessions. nil: no
	// "languages" (Stats alone).
	LanguageStats    func() map[string]supervisor.Stats
	LanguageSessions func() map[string]int
	// Sessions caps the MCP sessions open (session.go).
	Sessions SessionLimits
	// OSSandbox is the OS sandbox workers start behind, for /healthz's
	// os_sandbox. nil: not reported.
	OSSandbox *oswall.Status
}

// DefaultSessionTimeout and DefaultKeepAlive are the Options defaults.
const (
	DefaultSessionTimeout = time.Hour
	DefaultKeepAlive      = 15 * time.Second
)

// Backend is what the front end serves, from the MCP server: the SDK server
// and the limits it shares with the other transports.
type Backend struct {
	// SDK is the MCP server. New adds a receiving middleware to it.
	SDK *sdk.Server
	// Tasks wraps the stateless handler with what the SDK does not serve
	// itself (the 2026-07-28 tasks extension); nil: nothing.
	Tasks func(http.Handler) http.Handler
	// Deliveries, Requests and Counters are the front end's limits, shared
	// with stdio.
	Deliveries *flow.Deliveries
	Requests   *flow.RequestBytes
	Counters   *flow.Counters
	// MaxBody is the largest request body taken.
	MaxBody int64
	// Metrics is served at /metrics; nil: /metrics is not served.
	Metrics http.Handler
	// Version is pyrun's, for the page at /.
	Version string
	// Log is pyrun's logger; SDKLog the SDK handlers'.
	Log    hclog.Logger
	SDKLog *slog.Logger
}

// Handler serves MCP over HTTP (see the package comment).
//
// Shutting down is two steps, so that running calls can finish in between:
// Drain refuses new sessions and streams, CloseSessions ends the open ones.
// Its methods are safe for concurrent use.
type Handler struct {
	b    Backend
	opts Options
	mux  *http.ServeMux
	log  hclog.Logger

	draining atomic.Bool
	// accepted counts the POSTs taken in before Drain. Their calls run to
	// their end before the pools close (WaitAccepted): one may not have
	// reached a pool's queue yet when the drain looks at the queue.
	acceptMu sync.Mutex
	accepted sync.WaitGroup

	sessions *sessionTable

	mu        sync.Mutex
	seq       uint64
	exchanges map[string]*exchange // the requests in flight, by id (exchangeHeader)
}

// New builds the HTTP front end for b.
func New(b Backend, o Options) *Handler {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	protect := o.Protect
	if protect == nil {
		protect = func(h http.Handler) http.Handler { return h }
	}
	if b.Log == nil {
		b.Log = hclog.NewNullLogger()
	}
	if b.Tasks == nil {
		b.Tasks = func(h http.Handler) http.Handler { return h }
	}
	h := &Handler{b: b, opts: o, mux: http.NewServeMux(), log: b.Log, exchanges: map[string]*exchange{}}
	h.sessions = newSessionTable(b.Counters, h.liveSessions)
	h.sessions.setLimits(o.Sessions)
	b.SDK.AddReceivingMiddleware(h.carry)

	getServer := func(*http.Request) *sdk.Server { return b.SDK }
	streamable := sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		Stateless:                    o.Stateless,
		PropagateRequestCancellation: o.Stateless,
		SessionTimeout:               o.SessionTimeout,
		Logger:                       b.SDKLog,
		MaxRequestBodyBytes:          b.MaxBody,
		// DNS-rebinding protection (DisableLocalhostProtection false) stays
		// on: a request that arrives on a loopback address must name a
		// loopback host.
	})
	// 2026-07-28 requests need a stateless handler (byRevision). Over it
	// a client cancels a call by dropping its POST, which reaches the
	// handler only with PropagateRequestCancellation.
	stateless := sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       b.SDKLog,
		MaxRequestBodyBytes:          b.MaxBody,
	})
	sse := sdk.NewSSEHandler(getServer, &sdk.SSEOptions{MaxRequestBodyBytes: b.MaxBody})

	h.mux.Handle("/mcp", protect(h.entrance("streamable", byRevision(streamable, b.Tasks(stateless)))))
	h.mux.Handle("/sse", protect(h.entrance("sse", withForwardedPrefix(sse))))
	if o.Stats != nil {
		h.mux.Handle("GET /healthz", http.HandlerFunc(h.health))
	}
	if b.Metrics != nil {
		metrics := b.Metrics
		if o.ProtectMetrics {
			metrics = protect(metrics)
		}
		h.mux.Handle("GET /metrics", metrics)
	}
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pyrun %s: MCP over Streamable HTTP at /mcp, over HTTP+SSE at /sse; /healthz, /metrics\n", b.Version)
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// Sessions are the MCP sessions open (or opening) and their cap, for
// /healthz and /metrics.
func (h *Handler) Sessions() (open, limit int) { return h.sessions.counts() }

// opensSomething reports whether r would start a session or a stream:
// every GET, a POST without a session on /mcp (initialize, any POST in
// stateless mode, any 2026-07-28 request). POSTs to existing sessions go
// through, so that their clients get answers rather than broken connections.
func (h *Handler) opensSomething(r *http.Request) bool {
	switch {
	case r.Method == http.MethodGet:
		return true
	case r.Method != http.MethodPost:
		return false
	case r.URL.Path == "/sse":
		return r.URL.Query().Get("sessionid") == ""
	}
	return h.opts.Stateless || r.Header.Get("Mcp-Session-Id") == ""
}

// Drain refuses new sessions and event streams with 503 (and /healthz says
// 503), while requests in existing sessions go on.
func (h *Handler) Drain() {
	h.acceptMu.Lock()
	defer h.acceptMu.Unlock()
	h.draining.Store(true)
}

// accept counts a POST taken in before Drain; the function returned is
// called once it has been answered.
func (h *Handler) accept() func() {
	h.acceptMu.Lock()
	defer h.acceptMu.Unlock()
	if h.draining.Load() {
		return func() {}
	}
	h.accepted.Add(1)
	return h.accepted.Done
}

// WaitAccepted returns once every POST taken in before Drain has been
// answered, or when ctx is done. Call it after Drain, before the pools
// close, so that a call accepted just before the drain is run, not refused
// as "shutting down".
func (h *Handler) WaitAccepted(ctx context.Context) error {
	done := make(chan struct{})
	go func() { // ends when the last accepted POST does, at the latest when the server stops
		h.accepted.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for accepted requests: %w", ctx.Err())
	}
}

// CloseSessions ends every MCP session once its running requests have been
// answered, which ends its event streams, then cancels any GET stream still
// open. It returns when ctx is done or every session has closed.
func (h *Handler) CloseSessions(ctx context.Context) error {
	h.Drain()
	var wg sync.WaitGroup
	for ss := range h.b.SDK.Sessions() {
		wg.Go(func() { _ = ss.Close() })
	}
	closed := make(chan struct{})
	go func() {
		wg.Wait()
		close(closed)
	}()
	var err error
	select {
	case <-closed:
	case <-ctx.Done():
		err = fmt.Errorf("close sessions: %w", ctx.Err())
	}
	h.mu.Lock()
	for _, x := range h.exchanges {
		if x.method == http.MethodGet {
			x.cancel()
		}
	}
	h.mu.Unlock()
	return err
}

// closeSession closes the Streamable HTTP session id, to evict it.
func (h *Handler) closeSession(id string) {
	if id == "" {
		return
	}
	for ss := range h.b.SDK.Sessions() {
		if ss.ID() == id {
			h.log.Info("closing an idle session to make room for a new one of the same client", "session", id)
			_ = ss.Close()
		}
	}
}

// liveSessions are the ids of the SDK's sessions open.
func (h *Handler) liveSessions() map[string]bool {
	m := map[string]bool{}
	for ss := range h.b.SDK.Sessions() {
		if id := ss.ID(); id != "" {
			m[id] = true
		}
	}
	return m
}

// Protocol revisions. The SDK (go-sdk v1.8.0) serves 2026-07-28 over HTTP
// only from a handler made with Stateless: true, and a stateful handler
// answers such requests with an error. So /mcp holds two SDK handlers over
// the same server and picks one per request by its MCP-Protocol-Version
// header: 2026-07-28 or later (a later one is answered by the SDK with the
// revisions it supports, for the client to choose) goes to the stateless
// one; anything else, including an initialize that has no header yet, to
// the handler of the older revisions, stateful unless Options.Stateless.

// StatelessRevision is the first MCP revision without sessions.
const StatelessRevision = "2026-07-28"

// protocolVersionHeader names the revision of a request over Streamable
// HTTP (from 2025-06-18 on; 2026-07-28 requires it on every request).
const protocolVersionHeader = "Mcp-Protocol-Version"

// byRevision routes a /mcp request to stateless when it speaks 2026-07-28
// or later, and to legacy otherwise.
func byRevision(legacy, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isStatelessRevision(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// isStatelessRevision reports whether r speaks a session-less revision.
// Revisions are dates, so they compare as strings; whatever is no date of
// an older revision goes to the stateless handler, which answers with the
// revisions it has.
func isStatelessRevision(r *http.Request) bool {
	return r.Header.Get(protocolVersionHeader) >= StatelessRevision
}

// withForwardedPrefix makes the SSE session's endpoint event right behind a
// reverse proxy that strips a path prefix and says so in X-Forwarded-Prefix:
// the SDK builds the POST URL from the path it sees, so the GET is shown the
// path the client used. POSTs are routed by their sessionid alone.
func withForwardedPrefix(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := cleanPrefix(r.Header.Get("X-Forwarded-Prefix")); p != "" && r.Method == http.MethodGet {
			r2 := r.Clone(r.Context())
			r2.URL.Path = p + r.URL.Path
			r2.URL.RawPath = ""
			r = r2
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPrefix checks an X-Forwarded-Prefix value: a plain absolute path
// (no scheme, host, query or dot segments), without its trailing slash; ""
// when it is not one. The value only ever reaches the client that sent it.
func cleanPrefix(p string) string {
	p = strings.TrimRight(strings.TrimSpace(p), "/")
	if p == "" || len(p) > 256 || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") ||
		strings.ContainsAny(p, "?#\\%\r\n\t ") || path.Clean(p) != p {
		return ""
	}
	return p
}

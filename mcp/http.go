package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// HTTPOptions configure the HTTP front end. The zero value of each field
// means its default.
type HTTPOptions struct {
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
	// bound to that client (see owners.go). nil: none.
	Protect func(http.Handler) http.Handler
	// ProtectMetrics puts /metrics behind Protect too.
	ProtectMetrics bool
	// Stats reports the pool for /healthz. nil: /healthz is not served.
	Stats func() supervisor.Stats
	// Metrics is served at /metrics. nil: /metrics is not served.
	Metrics *Metrics
	// SessionsOpen counts open Python sessions for /healthz. nil: 0.
	SessionsOpen func() int
	// LanguageStats reports each language's pool for /healthz's
	// "languages", and LanguageSessions its open sessions. nil: no
	// "languages" (Stats alone).
	LanguageStats    func() map[string]supervisor.Stats
	LanguageSessions func() map[string]int
	// Sessions caps the MCP sessions open (sessioncap.go).
	Sessions SessionLimits
	// OSSandbox is the OS sandbox workers start behind, for /healthz's
	// os_sandbox. nil: not reported.
	OSSandbox *oswall.Status
}

// HTTPHandler serves MCP over HTTP: Streamable HTTP at /mcp, the legacy
// HTTP+SSE transport at /sse (its POST URL is /sse?sessionid=...), and
// /healthz and /metrics. Both transports are the SDK's own handlers.
//
// Shutting down is two steps, so that running calls can finish in between:
// Drain refuses new sessions and streams, CloseSessions ends the open ones.
// Its methods are safe for concurrent use.
type HTTPHandler struct {
	srv  *Server
	opts HTTPOptions
	mux  *http.ServeMux
	// maxBody is the largest request body taken (the SDK's
	// MaxRequestBodyBytes).
	maxBody int64

	draining atomic.Bool
	// accepted counts the POSTs taken in before Drain. Their calls run to
	// their end before the pools close (WaitAccepted): one may not have
	// reached a pool's queue yet when the drain looks at the queue.
	acceptMu   sync.Mutex
	accepted   sync.WaitGroup
	owners     sseOwners
	caps       *sessionCap
	sseStreams sync.Map // HTTP+SSE session id -> *outStream

	mu      sync.Mutex
	streams map[*http.Request]context.CancelFunc // open GET streams
}

// DefaultSessionTimeout and DefaultKeepAlive are the HTTPOptions defaults.
const (
	DefaultSessionTimeout = time.Hour
	DefaultKeepAlive      = 15 * time.Second
)

// MaxRequestBody is the largest request body pyrun takes, over HTTP or as
// one stdio line, for a --max-code of maxCode: the code and the globals,
// each at most maxCode, JSON-escaped, and 1 MiB for the rest; at least
// 4 MiB.
func MaxRequestBody(maxCode int) int64 { return max(int64(4<<20), 2*int64(maxCode)+1<<20) }

// HTTPHandler builds the HTTP front end around s.
func (s *Server) HTTPHandler(o HTTPOptions) *HTTPHandler {
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
	h := &HTTPHandler{srv: s, opts: o, mux: http.NewServeMux(), streams: map[*http.Request]context.CancelFunc{}}
	h.caps = newSessionCap(s.front.counters, s.liveSessions)
	h.caps.setLimits(o.Sessions)
	getServer := func(*http.Request) *sdk.Server { return s.sdk }
	// A request body carries the code and its globals, JSON-escaped.
	maxBody := MaxRequestBody(s.options().MaxCode)
	h.maxBody = maxBody
	streamable := sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		Stateless:                    o.Stateless,
		PropagateRequestCancellation: o.Stateless,
		SessionTimeout:               o.SessionTimeout,
		Logger:                       slogFor(s.log.Named("http")),
		MaxRequestBodyBytes:          maxBody,
		// DNS-rebinding protection (DisableLocalhostProtection false) stays
		// on: a request that arrives on a loopback address must name a
		// loopback host.
	})
	// 2026-07-28 requests need a stateless handler (revisions.go). Over
	// it a client cancels a call by dropping its POST, which reaches the
	// handler only with PropagateRequestCancellation.
	var mcpHandler http.Handler = byRevision(streamable, s.httpTasks(maxBody, sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       slogFor(s.log.Named("http")),
		MaxRequestBodyBytes:          maxBody,
	})))
	sse := sdk.NewSSEHandler(getServer, &sdk.SSEOptions{MaxRequestBodyBytes: maxBody})

	h.mux.Handle("/mcp", protect(h.front("streamable", h.transport(s.CancelOnDisconnect(mcpHandler)))))
	h.mux.Handle("/sse", protect(h.front("sse", h.transport(h.bindSSE(withForwardedPrefix(sse))))))
	if o.Stats != nil {
		h.mux.Handle("GET /healthz", http.HandlerFunc(h.health))
	}
	if o.Metrics != nil {
		o.Metrics.countSessions(s.sessionCount)
		o.Metrics.countFront(s.front.counters, s.front.out.waitingBytes, h.caps.counts)
		o.Metrics.countRequestBytes(s.front.bytes.held)
		metrics := o.Metrics.handler()
		if o.ProtectMetrics {
			metrics = protect(metrics)
		}
		h.mux.Handle("GET /metrics", metrics)
	}
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pyrun %s: MCP over Streamable HTTP at /mcp, over HTTP+SSE at /sse; /healthz, /metrics\n",
			s.options().Version)
	})
	return h
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// transport wraps an MCP transport handler: it refuses new sessions and
// streams while draining, keeps event streams alive, and lets CloseSessions
// end the GET streams that outlive their sessions.
func (h *HTTPHandler) transport(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.draining.Load() && h.opensSomething(r) {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "pyrun is shutting down", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodPost {
			h.acceptMu.Lock()
			early := !h.draining.Load()
			if early {
				h.accepted.Add(1)
			}
			h.acceptMu.Unlock()
			if early {
				defer h.accepted.Done()
			}
		}
		if r.Method == http.MethodGet {
			ctx, cancel := context.WithCancel(r.Context())
			r = r.WithContext(ctx)
			h.mu.Lock()
			h.streams[r] = cancel
			h.mu.Unlock()
			defer func() {
				h.mu.Lock()
				delete(h.streams, r)
				h.mu.Unlock()
				cancel()
			}()
		}
		h.srv.live.keepAlive(next, h.opts.KeepAlive).ServeHTTP(w, r)
	})
}

// opensSomething reports whether r would start a session or a stream:
// every GET, a POST without a session on /mcp (initialize, any POST in
// stateless mode, any 2026-07-28 request). POSTs to existing sessions go through, so that their
// clients get answers rather than broken connections.
func (h *HTTPHandler) opensSomething(r *http.Request) bool {
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
func (h *HTTPHandler) Drain() {
	h.acceptMu.Lock()
	defer h.acceptMu.Unlock()
	h.draining.Store(true)
}

// WaitAccepted returns once every POST taken in before Drain has been
// answered, or when ctx is done. Call it after Drain, before the pools
// close, so that a call accepted just before the drain is run, not refused
// as "shutting down".
func (h *HTTPHandler) WaitAccepted(ctx context.Context) error {
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
func (h *HTTPHandler) CloseSessions(ctx context.Context) error {
	h.Drain()
	var wg sync.WaitGroup
	for ss := range h.srv.sdk.Sessions() {
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
	for _, cancel := range h.streams {
		cancel()
	}
	h.mu.Unlock()
	return err
}

// health answers /healthz: 200 when at least one worker is up (idle or
// running a call), 503 otherwise or while shutting down.
func (h *HTTPHandler) health(w http.ResponseWriter, _ *http.Request) {
	s := h.opts.Stats()
	body := struct {
		Status          string `json:"status"`
		WorkersReady    int    `json:"workers_ready"`
		WorkersIdle     int    `json:"workers_idle"`
		WorkersBusy     int    `json:"workers_busy"`
		WorkersStarting int    `json:"workers_starting"`
		WorkersTotal    int    `json:"workers_total"`
		Queued          int    `json:"queued"`
		SessionsOpen    int    `json:"sessions_open"`
		StartError      string `json:"start_error,omitempty"`
		MCPSessions     int    `json:"mcp_sessions"`
		MCPSessionsMax  int    `json:"mcp_sessions_max"`
		ResultsWaiting  int64  `json:"results_waiting_bytes"`
		// Languages: each language's pool, when there are several.
		Languages map[string]languageHealth `json:"languages,omitempty"`
		// OSSandbox: the layers of the OS sandbox in force.
		OSSandbox *oswall.Status `json:"os_sandbox,omitempty"`
	}{
		Status:          "ok",
		WorkersReady:    s.Ready + s.Busy,
		WorkersIdle:     s.Ready,
		WorkersBusy:     s.Busy,
		WorkersStarting: s.Starting,
		WorkersTotal:    s.Workers,
		Queued:          s.Queued,
		StartError:      s.StartError,
		ResultsWaiting:  h.srv.front.out.waitingBytes(),
		OSSandbox:       h.opts.OSSandbox,
	}
	if h.opts.SessionsOpen != nil {
		body.SessionsOpen = h.opts.SessionsOpen()
	}
	body.MCPSessions, body.MCPSessionsMax = h.caps.counts()
	notOK := "" // the status of a language that cannot take calls
	if h.opts.LanguageStats != nil {
		body.Languages, notOK = h.languagesHealth()
	}
	code := http.StatusOK
	switch {
	case h.draining.Load():
		body.Status, code = "shutting-down", http.StatusServiceUnavailable
	case body.WorkersReady == 0:
		body.Status, code = "starting", http.StatusServiceUnavailable
		if s.StartError != "" {
			body.Status = "failing"
		}
	case notOK != "":
		// A client of this instance may call any of its languages.
		body.Status, code = notOK, http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
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

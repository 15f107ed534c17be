package httpfront

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
)

// exchange is one HTTP request to /mcp or /sse, from its first byte to its
// answer: a POST that carries messages (and, over Streamable HTTP, their
// answers), a GET that holds an event stream open, a DELETE that ends a
// session. Everything pyrun keeps about it is here; the tool handler finds
// it by exchangeHeader (carry).
type exchange struct {
	id        string // exchangeHeader's value
	method    string
	client    string // clientKey: who it comes from
	transport string // "streamable" or "sse"
	// ctx is the request's, done when its client drops it or cancel is
	// called (its stream stalled, its session was evicted, the server
	// closes its sessions).
	ctx    context.Context
	cancel context.CancelFunc

	// Set before the SDK's handler runs, then fixed.
	session *session     // the MCP session it belongs to; nil: none
	opens   *session     // the Streamable HTTP session its initialize opens; nil: none
	out     *flow.Stream // the stream its results go out on; nil: none (an HTTP+SSE POST, a DELETE)
	keep    *keepAlive   // its response writer's keep-alive; nil: keep-alive is off
}

// exchangeHeader carries an exchange's id from the front end through the
// SDK (RequestExtra.Header) to the tool handler's middleware (carry).
// Whatever a client sends under this name is removed.
const exchangeHeader = "X-Pyrun-Exchange"

// ErrRequestClosed is the cause of a call's cancellation when the HTTP
// request that carried it ended first: its client dropped it, or its
// response stalled. The SDK leaves such calls running (it would let a
// client resume the stream from an EventStore; pyrun has none, so the
// result is lost): the worker is better freed.
var ErrRequestClosed = errors.New("the client closed the HTTP request that carried the call")

// ErrSessionEnded is the cause of a call's cancellation when its client
// ended the session it came in (HTTP DELETE).
var ErrSessionEnded = errors.New("the client ended the MCP session (HTTP DELETE) while the call ran")

// entrance is where a request to transport's endpoint ("streamable" or
// "sse") comes in: it is refused while draining if it would open
// something, counted for WaitAccepted, its bytes counted before a byte of
// it is decoded, and its exchange made and handed to the transport.
func (h *Handler) entrance(transport string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(exchangeHeader)
		if h.draining.Load() && h.opensSomething(r) {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "pyrun is shutting down", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodPost {
			defer h.accept()()
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		r = r.WithContext(ctx)
		x := &exchange{method: r.Method, client: clientKey(r), transport: transport, ctx: ctx, cancel: cancel}
		if r.Method == http.MethodPost {
			// Counted before a byte of it is decoded: the body's declared
			// length, or the most a body may be.
			n := r.ContentLength
			if n < 0 || n > h.b.MaxBody {
				n = h.b.MaxBody
			}
			release, err := h.b.Requests.Reserve(x.client, n)
			if err != nil {
				h.refuseBody(w, r, transport, err)
				return
			}
			defer release()
		}
		switch {
		case transport == "sse" && r.Method == http.MethodGet:
			h.serveSSEStream(x, w, r, next)
		case transport == "sse":
			h.serveSSEPost(x, w, r, next)
		default:
			h.serveStreamable(x, w, r, next)
		}
	})
}

// serveSSEStream serves the GET of an HTTP+SSE session: the session is
// capped, bound to its opener, and its results go out on this stream.
func (h *Handler) serveSSEStream(x *exchange, w http.ResponseWriter, r *http.Request, next http.Handler) {
	var owner string
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		owner = ti.UserID
	}
	s, err := h.sessions.admit(x.client, x.transport, owner, func(string) { x.cancel() })
	if err != nil {
		refuseSession(w, err)
		return
	}
	defer h.sessions.remove(s)
	x.session = s
	x.out = h.b.Deliveries.Open(&s.backlog, x.client, x.transport, x.cancel)
	defer x.out.Close()
	h.sessions.opened(s, "", x.out)
	// The session's handlers see this request's context.
	r = r.WithContext(flow.WithStream(r.Context(), x.out))
	h.pass(x, w, r, next)
}

// serveSSEPost serves a POST to an HTTP+SSE session: refused while the
// session's results are not being read, and from anyone but the client
// that opened the session with credentials (403, as the SDK does on
// Streamable HTTP).
func (h *Handler) serveSSEPost(x *exchange, w http.ResponseWriter, r *http.Request, next http.Handler) {
	out, owner := h.sessions.sse(r.URL.Query().Get("sessionid"))
	if err := out.BackedUp(); err != nil {
		h.b.Counters.HeldBack.WithLabelValues(x.transport, "call").Inc()
		w.Header().Set("Retry-After", "5")
		http.Error(w, err.Error()+"; read the event stream", http.StatusServiceUnavailable)
		return
	}
	if ti := auth.TokenInfoFromContext(r.Context()); owner != "" && (ti == nil || ti.UserID != owner) {
		h.log.Warn("refused a request to another client's session", "transport", x.transport,
			"client", clientName(ti), "owner", owner)
		http.Error(w, "Forbidden: this session belongs to another client", http.StatusForbidden)
		return
	}
	h.pass(x, w, r, next)
}

// serveStreamable serves a request to /mcp: an initialize POST is a new
// session, within the caps; a request to a session counts as its use; a
// DELETE stops the session's calls before the SDK ends it.
func (h *Handler) serveStreamable(x *exchange, w http.ResponseWriter, r *http.Request, next http.Handler) {
	sid := r.Header.Get("Mcp-Session-Id")
	backlog := new(flow.Backlog)
	switch {
	case h.opts.Stateless:
	case sid == "" && r.Method == http.MethodPost:
		s, err := h.sessions.admit(x.client, x.transport, "", h.closeSession)
		if err != nil {
			refuseSession(w, err)
			return
		}
		// Named as the answer's headers go out (exchangeWriter), before
		// the client can use the id; or here, when it got none.
		x.opens = s
		defer func() { h.sessions.opened(s, w.Header().Get("Mcp-Session-Id"), nil) }()
	case sid != "" && r.Method == http.MethodDelete:
		h.endSession(sid)
		h.pass(x, w, r, next)
		return
	case sid != "":
		post := r.Method == http.MethodPost
		s, ok := h.sessions.enter(sid, post)
		if !ok {
			http.Error(w, "session ended: its client sent DELETE; start a new session", http.StatusNotFound)
			return
		}
		defer h.sessions.leave(s, post)
		if s != nil {
			x.session, backlog = s, &s.backlog
		}
	}
	x.out = h.b.Deliveries.Open(backlog, x.client, x.transport, x.cancel)
	defer x.out.Close()
	h.pass(x, w, r, next)
}

// deleteWait bounds how long a DELETE waits for the answers to the calls it
// stopped to reach their POSTs.
const deleteWait = 10 * time.Second

// endSession stops the calls of the Streamable HTTP session sid and waits
// (bounded) for their answers to go out, before the SDK ends the session:
// each call's POST gets an error result, not an empty response.
func (h *Handler) endSession(sid string) {
	s, answered, stopped := h.sessions.ending(sid)
	if s == nil {
		return
	}
	if stopped > 0 {
		h.log.Info("session ended by its client: stopping its calls", "session", sid, "calls", stopped)
	}
	if answered != nil {
		select {
		case <-answered:
		case <-time.After(deleteWait):
			h.log.Warn("session ended by its client: its calls' answers did not go out in time", "session", sid)
		}
	}
	h.sessions.remove(s)
}

// pass hands the exchange to next (the SDK's handler): its writes get
// deadlines and are accounted to its stream, quiet event streams get
// keep-alive comments, and the tool handler can find it by its id while
// next runs.
func (h *Handler) pass(x *exchange, w http.ResponseWriter, r *http.Request, next http.Handler) {
	if x.out != nil {
		ew := &exchangeWriter{ResponseWriter: w, x: x, timeout: h.b.Deliveries.Limits().WriteTimeout}
		if x.transport == "sse" && x.method == http.MethodGet {
			ew.name = func(id string) { h.sessions.name(x.session, id) }
		}
		if s := x.opens; s != nil {
			ew.header = func() { h.sessions.opened(s, ew.Header().Get("Mcp-Session-Id"), nil) }
		}
		w = ew
	}
	if h.opts.KeepAlive > 0 {
		x.keep = newKeepAlive(w, h.opts.KeepAlive)
		defer x.keep.stop()
		w = x.keep
	}
	h.mu.Lock()
	h.seq++
	x.id = strconv.FormatUint(h.seq, 36)
	h.exchanges[x.id] = x
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.exchanges, x.id)
		h.mu.Unlock()
	}()
	r.Header.Set(exchangeHeader, x.id)
	next.ServeHTTP(w, r)
}

// carry is the SDK server's receiving middleware: a tool call that came in
// a Streamable HTTP POST runs tied to it (it stops when the POST ends, or
// when its session is ended by DELETE), its result is accounted to the
// POST's stream (flow.StreamOf), and the POST's event stream is kept alive
// from now on.
func (h *Handler) carry(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		var x *exchange
		if extra := req.GetExtra(); method == "tools/call" && extra != nil && extra.Header != nil {
			h.mu.Lock()
			x = h.exchanges[extra.Header.Get(exchangeHeader)]
			h.mu.Unlock()
		}
		if x == nil {
			return next(ctx, method, req) // stdio, HTTP+SSE (the stream is in ctx), another handler's
		}
		// The SDK has set the response's headers by now (it hands calls
		// to handlers only after that): an event stream may be started.
		if x.keep != nil {
			x.keep.expectStream()
		}
		ctx, cancel := context.WithCancelCause(flow.WithStream(ctx, x.out))
		stop := context.AfterFunc(x.ctx, func() { cancel(ErrRequestClosed) })
		untrack := h.sessions.track(x.session, cancel)
		defer func() {
			untrack()
			stop()
			cancel(nil)
		}()
		return next(ctx, method, req)
	}
}

// exchangeWriter is the response writer of an exchange with a stream:
// every write and flush has a deadline, a write that misses it closes the
// stream, and what is written is accounted to the stream. On an HTTP+SSE
// session's GET it learns the session's id from the endpoint event; on a
// Streamable HTTP initialize, from the headers of its answer.
type exchangeWriter struct {
	http.ResponseWriter
	x       *exchange
	timeout time.Duration

	mu     sync.Mutex
	header func()          // called as the headers go out, once
	name   func(id string) // records the session's id; nil once it has
	looked int             // writes looked at for it
}

func (w *exchangeWriter) WriteHeader(code int) {
	w.mu.Lock()
	w.headerLocked()
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *exchangeWriter) headerLocked() {
	if w.header != nil {
		w.header()
		w.header = nil
	}
}

func (w *exchangeWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.headerLocked()
	if w.name != nil && w.looked < 4 {
		w.looked++
		if id := endpointSessionID(b); id != "" {
			w.name(id)
			w.name = nil
		}
	}
	w.mu.Unlock()
	st := w.x.out
	if st.Stalled() {
		return 0, flow.ErrStalled
	}
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(w.timeout))
	n, err := w.ResponseWriter.Write(b)
	_ = rc.SetWriteDeadline(time.Time{})
	if err != nil {
		st.Stall(errors.Is(err, os.ErrDeadlineExceeded))
		return n, err
	}
	st.Wrote(n)
	return n, nil
}

func (w *exchangeWriter) Flush() {
	_ = w.FlushError()
}

// FlushError is what http.ResponseController calls.
func (w *exchangeWriter) FlushError() error {
	st := w.x.out
	if st.Stalled() {
		return flow.ErrStalled
	}
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(w.timeout))
	err := rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		st.Stall(errors.Is(err, os.ErrDeadlineExceeded))
		return err
	}
	return nil
}

// Unwrap lets http.ResponseController reach the connection's other controls.
func (w *exchangeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var endpointEvent = []byte("event: endpoint\ndata: ")

// endpointSessionID is the session id in an HTTP+SSE stream's endpoint
// event, when b holds it. The SDK picks the id and sends it in the
// stream's first event (the POST URL, ...?sessionid=ID), which is where
// pyrun learns it, before the client can.
func endpointSessionID(b []byte) string {
	i := bytes.Index(b, endpointEvent)
	if i < 0 {
		return ""
	}
	data := b[i+len(endpointEvent):]
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	u, err := url.Parse(string(data))
	if err != nil {
		return ""
	}
	return u.Query().Get("sessionid")
}

// clientKey is who a request comes from, for the per-client caps: the
// access-control identity, else the remote IP address.
func clientKey(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// clientName names the client of credentials ti in logs.
func clientName(ti *auth.TokenInfo) string {
	if ti == nil || ti.UserID == "" {
		return "anonymous"
	}
	return ti.UserID
}

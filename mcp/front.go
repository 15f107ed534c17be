package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The front end's limits, around the SDK's transports: what waits to be
// written to a client (delivery.go), how many sessions are open
// (sessioncap.go), and a session ended while its calls run.

// frontState is the Server's share of them.
type frontState struct {
	counters *frontCounters
	out      *deliveries
	bytes    *requestBytes // request bytes held (requestbytes.go)
	posts    sync.Map      // deliveryHeader value -> *outStream of a Streamable HTTP POST
	seq      atomic.Uint64
	calls    sessionCalls
}

func (f *frontState) init() {
	f.counters = newFrontCounters()
	f.out = newDeliveries(f.counters)
	f.bytes = newRequestBytes(f.counters)
	f.calls.m = map[string]map[*callRef]struct{}{}
}

// errSessionEnded is the cause of a call's cancellation when its client
// ended the session it came in (HTTP DELETE).
var errSessionEnded = errors.New("the client ended the MCP session (HTTP DELETE) while the call ran")

// handle runs a call within the front end's limits: it is refused while its
// session's results are not being read, its result waits for room to be
// written, and it stops when its session is ended.
func (s *Server) handle(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	st := s.streamFor(ctx, req)
	if err := st.admit(); err != nil {
		return toolError(err), nil
	}
	var sid string
	if req != nil && req.Session != nil {
		sid = req.Session.ID()
	}
	// A Streamable HTTP POST's bytes are held from its body's first byte
	// to its answer (front); the arguments of the others' calls (HTTP+SSE,
	// whose POST is answered once the call is queued, and stdio) are
	// counted here, until the result.
	if st != nil && st.transport != "streamable" && req != nil && req.Params != nil {
		n := int64(len(req.Params.Arguments))
		if st.transport == "stdio" {
			defer s.front.bytes.force(st.client, n)() // its reader waits for room instead
		} else {
			release, err := s.front.bytes.reserve(st.client, n)
			if err != nil {
				return st.finish(toolError(err)), nil
			}
			defer release()
		}
	}
	ctx, untrack := s.front.calls.track(ctx, sid)
	res, err := s.runCall(ctx, req)
	untrack()
	if errors.Is(context.Cause(ctx), errSessionEnded) {
		s.front.counters.deleteCancelled.Inc()
		res, err = toolError(fmt.Errorf("the call was stopped: %w", errSessionEnded)), nil
	}
	return st.finish(res), err
}

// sessionCalls are the calls running in each Streamable HTTP session.
type sessionCalls struct {
	mu sync.Mutex
	m  map[string]map[*callRef]struct{}
}

type callRef struct{ cancel context.CancelCauseFunc }

func (c *sessionCalls) track(ctx context.Context, sid string) (context.Context, func()) {
	if sid == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ref := &callRef{cancel: cancel}
	c.mu.Lock()
	if c.m[sid] == nil {
		c.m[sid] = map[*callRef]struct{}{}
	}
	c.m[sid][ref] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.m[sid], ref)
		if len(c.m[sid]) == 0 {
			delete(c.m, sid)
		}
		c.mu.Unlock()
		cancel(nil)
	}
}

// stop cancels the calls of session sid and says how many there were.
func (c *sessionCalls) stop(sid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ref := range c.m[sid] {
		ref.cancel(errSessionEnded)
	}
	return len(c.m[sid])
}

// deleteWait bounds how long a DELETE waits for the answers to the calls it
// stopped to reach their POSTs.
const deleteWait = 10 * time.Second

// front wraps the SDK's handler for transport ("sse" or "streamable"): it
// caps sessions, puts deadlines on what is written and accounts for the
// results waiting, and ends a session's calls before a DELETE ends it.
func (h *HTTPHandler) front(transport string, next http.Handler) http.Handler {
	f := &h.srv.front
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(deliveryHeader)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		r = r.WithContext(ctx)
		client := clientKey(r)
		if r.Method == http.MethodPost {
			// Counted before a byte of it is decoded: the body's declared
			// length, or the most a body may be.
			n := r.ContentLength
			if n < 0 || n > h.maxBody {
				n = h.maxBody
			}
			release, err := f.bytes.reserve(client, n)
			if err != nil {
				h.refuseBody(w, r, transport, err)
				return
			}
			defer release()
		}
		lim := f.out.limits()
		switch {
		case transport == "sse" && r.Method == http.MethodGet:
			e, err := h.caps.admit(client, transport, func(string) { cancel() })
			if err != nil {
				refuseSession(w, err)
				return
			}
			defer h.caps.remove(e)
			st := f.out.open("sse:"+strconv.FormatUint(f.seq.Add(1), 10), client, transport, cancel)
			defer st.close()
			h.caps.opened(e, "", st)
			r = r.WithContext(context.WithValue(ctx, outStreamKey{}, st))
			sw := &sseEndpointWriter{ResponseWriter: &deliveryWriter{ResponseWriter: w, st: st, timeout: lim.WriteTimeout},
				streams: &h.sseStreams, st: st}
			defer sw.forget()
			next.ServeHTTP(sw, r)
		case transport == "sse":
			if v, ok := h.sseStreams.Load(r.URL.Query().Get("sessionid")); ok {
				if err := v.(*outStream).backedUp(); err != nil {
					f.counters.heldBack.WithLabelValues(transport, "call").Inc()
					w.Header().Set("Retry-After", "5")
					http.Error(w, err.Error()+"; read the event stream", http.StatusServiceUnavailable)
					return
				}
			}
			next.ServeHTTP(w, r)
		default:
			h.serveStreamable(w, r, client, cancel, next)
		}
	})
}

// serveStreamable is front for Streamable HTTP.
func (h *HTTPHandler) serveStreamable(w http.ResponseWriter, r *http.Request, client string, cancel func(), next http.Handler) {
	f := &h.srv.front
	sid := r.Header.Get("Mcp-Session-Id")
	key := "mcp:" + sid
	if h.opts.Stateless || sid == "" {
		key = "post:" + strconv.FormatUint(f.seq.Add(1), 10)
	}
	switch {
	case h.opts.Stateless:
	case sid == "" && r.Method == http.MethodPost:
		e, err := h.caps.admit(client, "streamable", h.closeSession)
		if err != nil {
			refuseSession(w, err)
			return
		}
		defer func() { h.caps.opened(e, w.Header().Get("Mcp-Session-Id"), nil) }()
	case sid != "" && r.Method == http.MethodDelete:
		h.endSession(sid)
		next.ServeHTTP(w, r)
		return
	case sid != "":
		e, ok := h.caps.enter(sid)
		if !ok {
			http.Error(w, "session ended: its client sent DELETE; start a new session", http.StatusNotFound)
			return
		}
		defer h.caps.leave(e)
	}
	st := f.out.open(key, client, "streamable", cancel)
	defer st.close()
	if r.Method == http.MethodPost {
		id := strconv.FormatUint(f.seq.Add(1), 10)
		r.Header.Set(deliveryHeader, id)
		f.posts.Store(id, st)
		defer f.posts.Delete(id)
	}
	next.ServeHTTP(&deliveryWriter{ResponseWriter: w, st: st, timeout: f.out.limits().WriteTimeout}, r)
}

// endSession stops the calls of the Streamable HTTP session sid and waits
// (bounded) for their answers to go out, before the SDK ends the session:
// each call's POST gets an error result, not an empty response.
func (h *HTTPHandler) endSession(sid string) {
	e, idle := h.caps.ending(sid)
	if e == nil {
		return
	}
	if n := h.srv.front.calls.stop(sid); n > 0 {
		h.srv.log.Info("session ended by its client: stopping its calls", "session", sid, "calls", n)
	}
	if idle != nil {
		select {
		case <-idle:
		case <-time.After(deleteWait):
			h.srv.log.Warn("session ended by its client: its calls' answers did not go out in time", "session", sid)
		}
	}
	h.caps.remove(e)
}

// closeSession closes the Streamable HTTP session id, to evict it.
func (h *HTTPHandler) closeSession(id string) {
	if id == "" {
		return
	}
	for ss := range h.srv.sdk.Sessions() {
		if ss.ID() == id {
			h.srv.log.Info("closing an idle session to make room for a new one of the same client", "session", id)
			_ = ss.Close()
		}
	}
}

// liveSessions are the ids of the Streamable HTTP sessions open.
func (s *Server) liveSessions() map[string]bool {
	m := map[string]bool{}
	for ss := range s.sdk.Sessions() {
		if id := ss.ID(); id != "" {
			m[id] = true
		}
	}
	return m
}

// refuseBody answers a POST refused before its body was decoded: over
// Streamable HTTP a JSON-RPC error with the request's own id, which an
// idScanner reads as the body goes by (never kept whole); over HTTP+SSE,
// whose answers go out on the event stream, and for a message without an
// id, 503 with Retry-After. The body is read to its end (at most the
// largest body), so that the client, still sending, gets the answer.
func (h *HTTPHandler) refuseBody(w http.ResponseWriter, r *http.Request, transport string, err error) {
	var sc idScanner
	_, _ = io.Copy(&sc, http.MaxBytesReader(w, r.Body, h.maxBody))
	id, hasID := sc.ID()
	_, hasMethod := sc.Method()
	h.srv.log.Info("request refused before it was decoded", "client", clientKey(r), "transport", transport,
		"bytes", r.ContentLength, "id", id.Raw(), "error", err.Error())
	w.Header().Set("Retry-After", "5")
	w.Header().Set("Content-Type", "application/json")
	resp := struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", nil, &jsonrpc.Error{Code: codeBusy, Message: err.Error()}}
	if transport == "streamable" && hasID && hasMethod {
		resp.ID = id.Raw()
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// codeBusy is the JSON-RPC error code of a request refused for a limit
// on what pyrun holds (a server error, in JSON-RPC's range for them).
const codeBusy = -32000

// refuseSession answers a new session refused by a cap: 503 with
// Retry-After and a JSON-RPC error a client can show.
func refuseSession(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":%q}}`+"\n", err.Error())
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

// endpointSessionID is the session id in an HTTP+SSE stream's endpoint
// event, when b holds it.
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

// sseEndpointWriter learns an HTTP+SSE session's id from its endpoint event
// (as endpointWriter does), so that its POSTs find the stream's backlog.
type sseEndpointWriter struct {
	http.ResponseWriter
	streams *sync.Map
	st      *outStream

	mu     sync.Mutex
	id     string
	looked int
}

func (e *sseEndpointWriter) Write(b []byte) (int, error) {
	e.mu.Lock()
	if e.id == "" && e.looked < 4 {
		e.looked++
		if id := endpointSessionID(b); id != "" {
			e.id = id
			e.streams.Store(id, e.st)
		}
	}
	e.mu.Unlock()
	return e.ResponseWriter.Write(b)
}

func (e *sseEndpointWriter) forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.id != "" {
		e.streams.Delete(e.id)
	}
}

func (e *sseEndpointWriter) Flush() { _ = http.NewResponseController(e.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection's other controls.
func (e *sseEndpointWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

package mcp

import (
	"context"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Who calls. Behind access control (HTTPOptions.Protect with the go-sdk's
// auth.RequireBearerToken) a request's context carries an auth.TokenInfo
// whose UserID is the client's identity. A session's handlers see the
// context of the request that opened it, and a session only takes requests
// from its opener: the SDK binds Streamable HTTP sessions to that UserID,
// and pyrun binds HTTP+SSE sessions the same way (sseOwners).

// Anonymous is the client of calls made without credentials: over stdio,
// and over HTTP without access control.
const Anonymous = "anonymous"

// clientOf is the identity of the client that made req.
func clientOf(ctx context.Context, req *sdk.CallToolRequest) string {
	var extra *sdk.RequestExtra
	if req != nil {
		extra = req.Extra
	}
	return clientOfExtra(ctx, extra)
}

// clientOfExtra is the identity of the client of any request.
func clientOfExtra(ctx context.Context, extra *sdk.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID
	}
	if ti := auth.TokenInfoFromContext(ctx); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	return Anonymous
}

// sseOwners maps the ids of open HTTP+SSE sessions to the identity of the
// client that opened them.
type sseOwners struct {
	m sync.Map // session id -> UserID
}

// bindSSE wraps the SDK's SSE handler: a session opened with credentials
// takes POSTs only from the same client; anyone else gets 403, as on
// Streamable HTTP. The SDK picks the session id and sends it in the
// stream's first event (the POST URL, ...?sessionid=ID), which is where
// bindSSE learns it, before the client can.
func (h *HTTPHandler) bindSSE(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := auth.TokenInfoFromContext(r.Context())
		switch r.Method {
		case http.MethodGet:
			if ti == nil || ti.UserID == "" {
				break
			}
			ew := &endpointWriter{ResponseWriter: w, owner: ti.UserID, owners: &h.owners}
			defer ew.forget()
			w = ew
		case http.MethodPost:
			id := r.URL.Query().Get("sessionid")
			owner, ok := h.owners.m.Load(id)
			if ok && (ti == nil || ti.UserID != owner.(string)) {
				h.srv.log.Warn("refused a request to another client's session", "transport", "sse",
					"client", clientName(ti), "owner", owner)
				http.Error(w, "Forbidden: this session belongs to another client", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func clientName(ti *auth.TokenInfo) string {
	if ti == nil || ti.UserID == "" {
		return Anonymous
	}
	return ti.UserID
}

// endpointWriter records the session id of an SSE stream's endpoint event
// with the stream's owner, and forgets it when the stream ends.
type endpointWriter struct {
	http.ResponseWriter
	owner  string
	owners *sseOwners

	mu     sync.Mutex
	id     string
	looked int // writes looked at
}

var endpointEvent = []byte("event: endpoint\ndata: ")

func (e *endpointWriter) Write(b []byte) (int, error) {
	e.mu.Lock()
	if e.id == "" && e.looked < 4 {
		e.looked++
		if id := endpointSessionID(b); id != "" {
			e.id = id
			e.owners.m.Store(id, e.owner)
		}
	}
	e.mu.Unlock()
	return e.ResponseWriter.Write(b)
}

func (e *endpointWriter) forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.id != "" {
		e.owners.m.Delete(e.id)
	}
}

func (e *endpointWriter) Flush() { _ = http.NewResponseController(e.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection's other controls.
func (e *endpointWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

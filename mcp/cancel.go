package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Cancellation. A call stops, as a timeout stops it (interrupt, then kill),
// when its handler's context ends: the SDK ends it on notifications/cancelled
// and when a stdio client hangs up. On Streamable HTTP the SDK does not end
// it when the client drops the POST that carried the call; CancelOnDisconnect
// ties the two together.

// errPostClosed is the cause of a call's cancellation when the client
// dropped the HTTP request that carried it.
var errPostClosed = errors.New("the client closed the HTTP request that carried the call")

// postHeader carries, from CancelOnDisconnect to the tool handler, the key of
// the HTTP request that delivered a call. It is set on every POST, replacing
// whatever a client sent.
const postHeader = "Pyrun-Post-Key"

// posts maps the keys of HTTP requests in flight to their contexts.
type posts struct {
	seq atomic.Uint64
	m   sync.Map // key -> context.Context
}

// CancelOnDisconnect wraps a Streamable HTTP handler serving s so that a
// tool call stops when the client drops the POST that carried it: the
// result could never reach the client, and its worker is better freed. The
// SDK's handler leaves such calls running (it would let a client resume the
// stream from an EventStore; pyrun's handler has none, so the result is lost).
func (s *Server) CancelOnDisconnect(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			r.Header.Del(postHeader)
			h.ServeHTTP(w, r)
			return
		}
		key := strconv.FormatUint(s.posts.seq.Add(1), 36)
		r.Header.Set(postHeader, key)
		s.posts.m.Store(key, r.Context())
		defer s.posts.m.Delete(key)
		h.ServeHTTP(w, r)
	})
}

// tieToPost returns ctx, also cancelled when the HTTP request that carried
// req ends, and the function that undoes the tie. Without CancelOnDisconnect
// around the handler, or off HTTP, it returns ctx as it is.
func (s *Server) tieToPost(ctx context.Context, req *sdk.CallToolRequest) (context.Context, func()) {
	if req.Extra == nil || req.Extra.Header == nil {
		return ctx, func() {}
	}
	key := req.Extra.Header.Get(postHeader)
	v, ok := s.posts.m.Load(key)
	if key == "" || !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(v.(context.Context), func() { cancel(errPostClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// cancelCause says, for pyrun's log, why a call's context ended.
func cancelCause(ctx context.Context) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errPostClosed):
		return cause.Error()
	case errors.Is(cause, io.EOF):
		return "the client hung up"
	case errors.Is(cause, context.Canceled):
		return "the client cancelled it (notifications/cancelled)"
	default:
		return cause.Error()
	}
}

package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpTasks serves the 2026-07-28 tasks extension on /mcp, in front of the
// SDK's stateless handler: a POST there is one request, so a task's call
// and the task methods are answered here, as JSON, and everything else
// goes on to the SDK, its body as it came. A task belongs to the client of
// the request's credentials (or to the anonymous client without access
// control), as the extension asks. (2025-11-25's tasks need answers the
// SDK writes changed, initialize's and tools/list's: over HTTP they would
// be inside its event streams, so pyrun offers them on stdio and the
// socket only.)
func (s *Server) httpTasks(maxBody int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if int64(len(body)) > maxBody || !bytes.Contains(body, []byte("task")) {
			next.ServeHTTP(w, r) // the SDK refuses what is too large
			return
		}
		var req request
		if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 || string(req.ID) == "null" {
			next.ServeHTTP(w, r)
			return
		}
		var rev string
		_ = json.Unmarshal(req.Params.Meta[protocolVersionMeta], &rev)
		if rev < revision20260728 {
			next.ServeHTTP(w, r)
			return
		}
		kind, ttl := s.taskKind(&req, rev)
		if kind == "" {
			next.ServeHTTP(w, r)
			return
		}
		// Only the credentials: a task outlives the POST that made it, so
		// its call is not tied to it (cancel.go ties calls by header).
		extra := &sdk.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context())}
		tc := taskCall{s: s, client: clientOfExtra(r.Context(), extra), extra: extra, ctx: r.Context()}
		res, rerr := tc.serve(kind, &req, rev, ttl)
		if res == nil && rerr == nil {
			return // the client went away
		}
		msg := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		if rerr != nil {
			msg["error"] = rerr
		} else {
			msg["result"] = res
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msg)
	})
}

package mcp

import (
	"strconv"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionNames names sessions for logs. A Streamable HTTP session has an id;
// an HTTP+SSE session, a stdio session and a stateless request do not, so
// they get "session-N" for as long as they last.
type sessionNames struct {
	seq   atomic.Uint64
	names sync.Map // *sdk.ServerSession -> string
}

func (s *Server) sessionName(ss *sdk.ServerSession) string {
	if ss == nil {
		return ""
	}
	if id := ss.ID(); id != "" {
		return id
	}
	if name, ok := s.names.names.Load(ss); ok {
		return name.(string)
	}
	name := "session-" + strconv.FormatUint(s.names.seq.Add(1), 10)
	if prev, loaded := s.names.names.LoadOrStore(ss, name); loaded {
		return prev.(string)
	}
	// The session owns this goroutine: it ends when the session does.
	go func() {
		_ = ss.Wait()
		s.names.names.Delete(ss)
	}()
	return name
}

// sessionCount is the number of open MCP sessions: those with an id
// (HTTP+SSE, stateful Streamable HTTP). A stateless request (--stateless,
// or MCP 2026-07-28) has a session of the SDK's with no id for as long as
// it is served, which is no session a client holds.
func (s *Server) sessionCount() int {
	n := 0
	for ss := range s.sdk.Sessions() {
		if ss.ID() != "" {
			n++
		}
	}
	return n
}

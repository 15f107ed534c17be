package mcp

import (
	"context"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Whether a call's output can reach its client while it runs. A session gets
// log messages only once it has set a level (logging/setLevel; a 2026-07-28
// request carries its own in _meta), and progress only for a request with a
// progress token. A call with neither runs without the live machinery: its
// goroutine, and the hand-offs to and from it on every call, would send
// nothing (the SDK drops log messages for a session with no level).

// logLevels remembers the sessions that set a log level. An entry goes when
// its session ends, as sessionNames' do, so the set stays as small as the
// set of open sessions.
type logLevels struct {
	m sync.Map // *sdk.ServerSession -> struct{}
}

// middleware notes a session's logging/setLevel before the SDK handles it,
// so that a call that follows it finds the level set.
func (l *logLevels) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method == "logging/setLevel" {
			if ss, ok := req.GetSession().(*sdk.ServerSession); ok && ss != nil {
				l.set(ss)
			}
		}
		return next(ctx, method, req)
	}
}

func (l *logLevels) set(ss *sdk.ServerSession) {
	if _, had := l.m.LoadOrStore(ss, struct{}{}); !had {
		// The session owns this goroutine: it ends when the session does.
		go func() {
			_ = ss.Wait()
			l.m.Delete(ss)
		}()
	}
}

// wantsLive says whether anything of req's call could be sent live.
func (l *logLevels) wantsLive(req *sdk.CallToolRequest) bool {
	if req.Session == nil {
		return false
	}
	if req.Params.GetProgressToken() != nil {
		return true
	}
	if _, ok := req.Params.GetMeta()[sdk.MetaKeyLogLevel]; ok {
		return true
	}
	_, ok := l.m.Load(req.Session)
	return ok
}

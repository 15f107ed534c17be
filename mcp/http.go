package mcp

import (
	"net/http"

	"github.com/pyrun/pyrun/mcp/httpfront"
)

// HTTPOptions configure the HTTP front end (package httpfront), and the
// metrics it serves.
type HTTPOptions struct {
	httpfront.Options
	// Metrics is served at /metrics, with the front end's own figures.
	// nil: /metrics is not served.
	Metrics *Metrics
}

// MaxRequestBody is the largest request body pyrun takes, over HTTP or as
// one stdio line, for a --max-code of maxCode: the code and the globals,
// each at most maxCode, JSON-escaped, and 1 MiB for the rest; at least
// 4 MiB.
func MaxRequestBody(maxCode int) int64 { return max(int64(4<<20), 2*int64(maxCode)+1<<20) }

// HTTPHandler builds the HTTP front end around s: the SDK's transports for
// s's tools, within the limits s shares with stdio.
func (s *Server) HTTPHandler(o HTTPOptions) *httpfront.Handler {
	// A request body carries the code and its globals, JSON-escaped.
	maxBody := MaxRequestBody(s.options().MaxCode)
	b := httpfront.Backend{
		SDK:        s.sdk,
		Tasks:      func(next http.Handler) http.Handler { return s.httpTasks(maxBody, next) },
		Deliveries: s.front.out,
		Requests:   s.front.bytes,
		Counters:   s.front.counters,
		MaxBody:    maxBody,
		Version:    s.options().Version,
		Log:        s.log,
		SDKLog:     slogFor(s.log.Named("http")),
	}
	if o.Metrics != nil {
		b.Metrics = o.Metrics.handler()
	}
	h := httpfront.New(b, o.Options)
	if o.Metrics != nil {
		o.Metrics.countSessions(s.sessionCount)
		o.Metrics.countFront(s.front.counters, s.front.out.WaitingBytes, h.Sessions)
		o.Metrics.countRequestBytes(s.front.bytes.Held)
	}
	return h
}

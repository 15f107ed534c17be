package mcp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// frontCounters count what the front end's limits did: streams closed for
// not draining, calls and results held back, sessions refused or evicted,
// slow request bodies cut off. They exist whether or not /metrics is
// served; HTTPHandler registers them when it is.
type frontCounters struct {
	stalls          *prometheus.CounterVec
	heldBack        *prometheus.CounterVec
	sessionsRefused *prometheus.CounterVec
	sessionsEvicted prometheus.Counter
	deleteCancelled prometheus.Counter
}

func newFrontCounters() *frontCounters {
	c := &frontCounters{
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_stream_stalls_total",
			Help: "Event streams and responses closed because a write to the client did not finish within write_timeout, by transport.",
		}, []string{"transport"}),
		heldBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_results_held_back_total",
			Help: "Calls refused (what=call) and results replaced by an error (what=result) because their client was not reading the results already sent, by transport.",
		}, []string{"transport", "what"}),
		sessionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_mcp_sessions_refused_total",
			Help: "New MCP sessions refused, by the cap that refused them: total (max_mcp_sessions) or client (client_max_mcp_sessions, when no idle session could be evicted).",
		}, []string{"cap"}),
		sessionsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrun_mcp_sessions_evicted_total",
			Help: "Idle MCP sessions closed to make room for a new session of the same client (client_max_mcp_sessions).",
		}),
		deleteCancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrun_calls_stopped_by_delete_total",
			Help: "Calls stopped because their client ended the session (HTTP DELETE) while they ran.",
		}),
	}
	for _, tr := range []string{"sse", "streamable", "stdio"} {
		c.stalls.WithLabelValues(tr)
		for _, what := range []string{"call", "result"} {
			c.heldBack.WithLabelValues(tr, what)
		}
	}
	for _, cp := range []string{"total", "client"} {
		c.sessionsRefused.WithLabelValues(cp)
	}
	return c
}

func (c *frontCounters) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.stalls, c.heldBack, c.sessionsRefused, c.sessionsEvicted, c.deleteCancelled}
}

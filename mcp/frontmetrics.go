package mcp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrun/pyrun/mcp/netguard"
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
	refused         *prometheus.CounterVec
}

// refusalLimits are the values of pyrun_requests_refused_total's limit
// label: the bound a request was refused for.
var refusalLimits = []string{"max_input_files", "max_request_bytes", "client_max_request_bytes", "stdio_max_line"}

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
	c.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pyrun_requests_refused_total",
		Help: "Requests refused by a bound on what they carry, before their call ran, by limit: max_input_files (entries of the files argument), max_request_bytes and client_max_request_bytes (request bytes held at once, by all clients and by one), stdio_max_line (a stdio line longer than pyrun reads).",
	}, []string{"limit"})
	for _, l := range refusalLimits {
		c.refused.WithLabelValues(l)
	}
	for _, tr := range []string{"sse", "streamable", "stdio", "socket"} {
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
	return []prometheus.Collector{c.stalls, c.heldBack, c.sessionsRefused, c.sessionsEvicted, c.deleteCancelled, c.refused}
}

// CountConnections adds the HTTP connection counts of a netguard.Listener.
func (m *Metrics) CountConnections(stats func() netguard.Stats) {
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	_ = m.reg.Register(&connCollector{stats: stats,
		open:     desc("pyrun_connections_open", "HTTP connections open."),
		refTotal: desc("pyrun_connections_refused_total", "HTTP connections refused by the cap on connections (max_conns)."),
		refAddr:  desc("pyrun_connections_refused_per_addr_total", "HTTP connections refused by the cap per address (max_conns_per_addr)."),
		bodies:   desc("pyrun_request_bodies_timed_out_total", "Request bodies that did not arrive within body_timeout."),
		unread:   desc("pyrun_answered_before_body_total", "Answers (401, 413, 503...) sent before the request's body was read; the connection was closed."),
	})
}

type connCollector struct {
	stats                                   func() netguard.Stats
	open, refTotal, refAddr, bodies, unread *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.refTotal, c.refAddr, c.bodies, c.unread} {
		ch <- d
	}
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.refTotal, prometheus.CounterValue, float64(s.RefusedTotal))
	ch <- prometheus.MustNewConstMetric(c.refAddr, prometheus.CounterValue, float64(s.RefusedPerAddr))
	ch <- prometheus.MustNewConstMetric(c.bodies, prometheus.CounterValue, float64(s.BodiesTimedOut))
	ch <- prometheus.MustNewConstMetric(c.unread, prometheus.CounterValue, float64(s.AnsweredUnread))
}

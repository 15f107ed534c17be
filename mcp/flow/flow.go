// Package flow bounds what pyrun holds for its clients, on every transport:
// the results that wait to be written to a session and to a client
// (Deliveries, with a Stream for each response, event stream or stdout, and
// a Backlog for each session), and the bytes of the requests in flight
// (RequestBytes). Counters count what those bounds refuse; IDScanner finds
// the id of a request refused before it was decoded, to answer it with.
//
//	c := flow.NewCounters()
//	out := flow.NewDeliveries(c)
//	st := out.Open(new(flow.Backlog), client, "stdio", nil)
//	defer st.Close()
//	if err := st.Admit(); err != nil { ... refuse the call ... }
//	if err := st.Finish(size, measure); err != nil { ... send err instead ... }
package flow

import "github.com/prometheus/client_golang/prometheus"

// Counters count what the front end's limits did: streams closed for
// not draining, calls and results held back, sessions refused or evicted,
// calls stopped by their session's end, requests refused for what they
// carry. They exist whether or not /metrics is served.
type Counters struct {
	Stalls          *prometheus.CounterVec // by transport
	HeldBack        *prometheus.CounterVec // by transport and what (call, result)
	SessionsRefused *prometheus.CounterVec // by cap (total, client)
	SessionsEvicted prometheus.Counter
	DeleteCancelled prometheus.Counter
	Refused         *prometheus.CounterVec // by limit (RefusalLimits)
}

// RefusalLimits are the values of pyrun_requests_refused_total's limit
// label: the bound a request was refused for.
var RefusalLimits = []string{"max_input_files", "max_request_bytes", "client_max_request_bytes", "stdio_max_line"}

// NewCounters makes the counters, every series of them at 0.
func NewCounters() *Counters {
	c := &Counters{
		Stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_stream_stalls_total",
			Help: "Event streams and responses closed because a write to the client did not finish within write_timeout, by transport.",
		}, []string{"transport"}),
		HeldBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_results_held_back_total",
			Help: "Calls refused (what=call) and results replaced by an error (what=result) because their client was not reading the results already sent, by transport.",
		}, []string{"transport", "what"}),
		SessionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_mcp_sessions_refused_total",
			Help: "New MCP sessions refused, by the cap that refused them: total (max_mcp_sessions) or client (client_max_mcp_sessions, when no idle session could be evicted).",
		}, []string{"cap"}),
		SessionsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrun_mcp_sessions_evicted_total",
			Help: "Idle MCP sessions closed to make room for a new session of the same client (client_max_mcp_sessions).",
		}),
		DeleteCancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrun_calls_stopped_by_delete_total",
			Help: "Calls stopped because their client ended the session (HTTP DELETE) while they ran.",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_requests_refused_total",
			Help: "Requests refused by a bound on what they carry, before their call ran, by limit: max_input_files (entries of the files argument), max_request_bytes and client_max_request_bytes (request bytes held at once, by all clients and by one), stdio_max_line (a stdio line longer than pyrun reads).",
		}, []string{"limit"}),
	}
	for _, l := range RefusalLimits {
		c.Refused.WithLabelValues(l)
	}
	for _, tr := range []string{"sse", "streamable", "stdio", "socket"} {
		c.Stalls.WithLabelValues(tr)
		for _, what := range []string{"call", "result"} {
			c.HeldBack.WithLabelValues(tr, what)
		}
	}
	for _, cp := range []string{"total", "client"} {
		c.SessionsRefused.WithLabelValues(cp)
	}
	return c
}

// Collectors are the counters, for a prometheus.Registry.
func (c *Counters) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.Stalls, c.HeldBack, c.SessionsRefused, c.SessionsEvicted, c.DeleteCancelled, c.Refused}
}

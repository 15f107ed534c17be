// Package flow bounds what pyrun holds for its clients, on every transport:
// the results that wait to be written to a session and to a client
// (Deliveries, with a Stream for each response, event stream or stdout, and
// a Backlog for each session), and the bytes of the requests in flight
// (RequestBytes). Counters count what those bounds refuse.
//
//	c := flow.NewCounters()
//	out := flow.NewDeliveries(c)
//	st := out.Open(new(flow.Backlog), client, "stdio", nil)
//	defer st.Close()
//	if err := st.Admit(); err != nil { ... refuse the call ... }
//	if err := st.Finish(size, measure); err != nil { ... send err instead ... }
package flow

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

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
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	one := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	c := &Counters{
		Stalls: vec("pyrun_stream_stalls_total",
			"Event streams and responses closed because a write to the client did not finish within write_timeout, by transport.",
			"transport"),
		HeldBack: vec("pyrun_results_held_back_total",
			"Calls refused (what=call) and results replaced by an error (what=result) because their client was not reading the results already sent, by transport.",
			"transport", "what"),
		SessionsRefused: vec("pyrun_mcp_sessions_refused_total",
			"New MCP sessions refused, by the cap that refused them: total (max_mcp_sessions) or client (client_max_mcp_sessions, when no idle session could be evicted).",
			"cap"),
		SessionsEvicted: one("pyrun_mcp_sessions_evicted_total",
			"Idle MCP sessions closed to make room for a new session of the same client (client_max_mcp_sessions)."),
		DeleteCancelled: one("pyrun_calls_stopped_by_delete_total",
			"Calls stopped because their client ended the session (HTTP DELETE) while they ran."),
		Refused: vec("pyrun_requests_refused_total",
			"Requests refused by a bound on what they carry, before their call ran, by limit: max_input_files (entries of the files argument), max_request_bytes and client_max_request_bytes (request bytes held at once, by all clients and by one), stdio_max_line (a stdio line longer than pyrun reads).",
			"limit"),
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

// Positive is v when it is positive, else d: a limit whose zero value
// means its default.
func Positive[T ~int | ~int64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// setting holds the limits in force, replaced as a whole (a reload) and
// read under a lock of their own.
type setting[L any] struct {
	mu sync.Mutex
	v  L
}

func (s *setting[L]) set(v L) {
	s.mu.Lock()
	s.v = v
	s.mu.Unlock()
}

func (s *setting[L]) get() L {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

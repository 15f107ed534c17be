package mcp

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// Metrics is pyrun's Prometheus registry. Calls are counted and timed by the
// Runner that Instrument returns; the pool's state (workers, queue,
// restarts) is read from its Stats at each scrape.
//
//	m := mcp.NewMetrics(version, pool.Stats)
//	srv := mcp.New(m.Instrument(pool), opts, log)
//	h := srv.HTTPHandler(mcp.HTTPOptions{Metrics: m, ...})
//
// Its methods are safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	calls     *prometheus.CounterVec
	duration  prometheus.Histogram
	queueWait prometheus.Histogram
	// langCalls is calls by language too (languages.go's metrics).
	langCalls *prometheus.CounterVec
	pool      *poolCollector
}

// callStatuses are the values of pyrun_calls_total's status label: a
// call's status, or cancelled (by its client), or rejected (it never ran:
// the queue was full or too slow, no worker could start, or pyrun was
// shutting down).
var callStatuses = []string{
	string(supervisor.StatusSuccess), string(supervisor.StatusRunError), string(supervisor.StatusInstallError),
	string(supervisor.StatusTimeout), string(supervisor.StatusMemoryError), string(supervisor.StatusCrashed),
	"cancelled", "rejected",
}

// NewMetrics builds the registry; stats is read at every scrape.
func NewMetrics(version string, stats func() supervisor.Stats) *Metrics {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrun_calls_total",
			Help: "Tool calls by how they ended: a result status, cancelled, or rejected (never ran).",
		}, []string{"status"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pyrun_call_duration_seconds",
			Help:    "Time calls ran on a worker, queue wait excluded.",
			Buckets: buckets,
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pyrun_queue_wait_seconds",
			Help:    "Time calls waited for a free worker (until they got one or were refused).",
			Buckets: buckets,
		}),
	}
	for _, s := range callStatuses {
		m.calls.WithLabelValues(s) // every series exists from the start
	}
	m.langCalls = newLanguageCalls()
	m.pool = &poolCollector{stats: stats}
	m.pool.maxClients.Store(DefaultMetricsMaxClients)
	m.reg.MustRegister(m.calls, m.duration, m.queueWait, m.langCalls, m.pool,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pyrun_build_info",
		Help:        "pyrun's version, as a label; the value is 1.",
		ConstLabels: prometheus.Labels{"version": version},
	}, func() float64 { return 1 }))
	return m
}

// OSSandbox adds pyrun_os_sandbox_layer: 1 for each layer of the OS
// sandbox in force, 0 for each missing or off.
func (m *Metrics) OSSandbox(st oswall.Status) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pyrun_os_sandbox_layer",
		Help: "Layers of the OS sandbox around worker processes (--os-sandbox): 1 in force, 0 not (missing on this machine, or off).",
	}, []string{"layer"})
	for _, l := range oswall.Layers {
		g.WithLabelValues(string(l)).Set(0)
	}
	for _, l := range st.Layers {
		g.WithLabelValues(string(l)).Set(1)
	}
	_ = m.reg.Register(g)
}

// countSessions adds a gauge of open MCP sessions.
func (m *Metrics) countSessions(n func() int) {
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pyrun_sessions",
		Help: "Open MCP sessions (HTTP+SSE and stateful Streamable HTTP).",
	}, func() float64 { return float64(n()) }))
}

// countFront adds the front end's limit counters and gauges.
func (m *Metrics) countFront(c *flow.Counters, waiting func() int64, sessions func() (int, int)) {
	for _, col := range c.Collectors() {
		_ = m.reg.Register(col)
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pyrun_results_waiting_bytes",
		Help: "Bytes of results waiting to be written to clients.",
	}, func() float64 { return float64(waiting()) }))
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pyrun_mcp_sessions_max",
		Help: "The cap on open MCP sessions (max_mcp_sessions).",
	}, func() float64 { _, n := sessions(); return float64(n) }))
}

// countRequestBytes adds a gauge of the request bytes held.
func (m *Metrics) countRequestBytes(held func() int64) {
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pyrun_request_bytes_held",
		Help: "Bytes of requests pyrun holds: bodies being read, and the arguments of calls in flight (max_request_bytes).",
	}, func() float64 { return float64(held()) }))
}

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Instrument returns a Runner that runs calls on r and counts and times them.
func (m *Metrics) Instrument(r Runner) Runner { return &instrumented{r: r, m: m} }

type instrumented struct {
	r Runner
	m *Metrics
}

func (i *instrumented) Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	return i.m.observed(ctx, job, func() (supervisor.Result, error) { return i.r.Run(ctx, job, ev) })
}

// observed runs a call of job through run, and counts and times it.
func (m *Metrics) observed(ctx context.Context, job supervisor.Job, run func() (supervisor.Result, error)) (supervisor.Result, error) {
	began := time.Now()
	res, err := run()
	m.observe(ctx, began, supervisor.JobLanguage(job), res, err)
	return res, err
}

// observe counts and times one call of language that began at began.
func (m *Metrics) observe(ctx context.Context, began time.Time, language string, res supervisor.Result, err error) {
	status := string(res.Status)
	switch {
	case res.Status == "":
		status = "rejected"
		if ctx.Err() != nil {
			status = "cancelled"
		}
		m.queueWait.Observe(time.Since(began).Seconds())
	case err != nil:
		status = "cancelled"
		fallthrough
	default:
		m.queueWait.Observe(res.QueueWait.Seconds())
		m.duration.Observe(res.Duration.Seconds())
	}
	// Both come from pyrun's own code today; bounded here all the same, so
	// that no path a client or a worker can reach adds label values.
	status = bounded(status, callStatuses)
	m.calls.WithLabelValues(status).Inc()
	m.langCalls.WithLabelValues(bounded(language, engineNames), status).Inc()
}

// otherLabel stands for any label value pyrun's code or configuration did
// not name in advance.
const otherLabel = "other"

// engineNames are the values of the language labels.
var engineNames = func() []string {
	var names []string
	for _, e := range supervisor.Engines() {
		names = append(names, e.Name())
	}
	return names
}()

// bounded is v if it is one of known, else otherLabel.
func bounded(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	return otherLabel
}

// DefaultMetricsMaxClients is how many clients pyrun_client_workers names
// by default.
const DefaultMetricsMaxClients = 32

// MaxClients bounds the clients pyrun_client_workers names: the first n by
// name; the rest are summed as "other" (Stats.ClientsWithin).
func (m *Metrics) MaxClients(n int) { m.pool.maxClients.Store(int64(n)) }

// poolCollector reads the pool's state at scrape time.
type poolCollector struct {
	stats      func() supervisor.Stats
	maxClients atomic.Int64
}

var (
	workersDesc = prometheus.NewDesc("pyrun_workers",
		"Workers by state: idle (ready for a call), busy (running one), starting.", []string{"state"}, nil)
	clientWorkersDesc = prometheus.NewDesc("pyrun_client_workers",
		"Workers each client owns (a worker runs the calls of one client only), by state: idle or busy; past --metrics-max-clients clients, the rest as client=\"other\".",
		[]string{"client", "state"}, nil)
	freshWorkersDesc = prometheus.NewDesc("pyrun_workers_fresh",
		"Idle workers that never ran a call, which a client's next new worker comes from.", nil, nil)
	workersConfiguredDesc = prometheus.NewDesc("pyrun_workers_configured",
		"The configured pool size.", nil, nil)
	queueDepthDesc = prometheus.NewDesc("pyrun_queue_depth",
		"Calls waiting for a free worker.", nil, nil)
	restartsDesc = prometheus.NewDesc("pyrun_worker_restarts_total",
		"Workers retired and replaced, by reason.", []string{"reason"}, nil)
	startsDesc = prometheus.NewDesc("pyrun_worker_starts_total",
		"Workers that became ready, by how they started: from the memory snapshot, or plainly (slower).",
		[]string{"from"}, nil)
	restoresDesc = prometheus.NewDesc("pyrun_session_restores_total",
		"Sessions' workers restored from checkpoints, by what onto: a parked restore started ahead, or a worker started for it (slower).",
		[]string{"onto"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, workersDesc, clientWorkersDesc, freshWorkersDesc, workersConfiguredDesc, queueDepthDesc, restartsDesc, startsDesc, restoresDesc)
}

// describe sends a collector's descriptions.
func describe(ch chan<- *prometheus.Desc, descs ...*prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(s.Ready), "idle")
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(s.Busy), "busy")
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(s.Starting), "starting")
	ch <- prometheus.MustNewConstMetric(freshWorkersDesc, prometheus.GaugeValue, float64(s.Fresh))
	for client, n := range s.ClientsWithin(int(c.maxClients.Load())) {
		ch <- prometheus.MustNewConstMetric(clientWorkersDesc, prometheus.GaugeValue, float64(n.Idle), client, "idle")
		ch <- prometheus.MustNewConstMetric(clientWorkersDesc, prometheus.GaugeValue, float64(n.Busy), client, "busy")
	}
	ch <- prometheus.MustNewConstMetric(workersConfiguredDesc, prometheus.GaugeValue, float64(s.Workers))
	ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(s.Queued))
	for _, k := range supervisor.RestartKinds() {
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(s.Counts.Restarts[k]), string(k))
	}
	for _, k := range []string{"snapshot", "plain"} {
		ch <- prometheus.MustNewConstMetric(startsDesc, prometheus.CounterValue, float64(s.Counts.Starts[k]), k)
	}
	for _, k := range []string{"parked", "started"} {
		ch <- prometheus.MustNewConstMetric(restoresDesc, prometheus.CounterValue, float64(s.Counts.Restores[k]), k)
	}
}

// CodeMode adds the metrics of code mode's tool calls, counted and timed
// per server and status (pyrun_tool_calls_total,
// pyrun_tool_call_duration_seconds), and each server's connection state
// (pyrun_mcp_server_up).
func (m *Metrics) CodeMode(hub *codemode.Hub) {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pyrun_tool_calls_total",
		Help: "Code mode: tool calls from Python to other MCP servers, by server and status.",
	}, []string{"server", "status"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pyrun_tool_call_duration_seconds",
		Help:    "Code mode: time tool calls took, checks included, by server.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"server"})
	m.reg.MustRegister(calls, duration, &hubCollector{hub: hub})
	hub.Observe(func(server, status string, d time.Duration) {
		status = bounded(status, codemode.Statuses)
		calls.WithLabelValues(server, status).Inc()
		duration.WithLabelValues(server).Observe(d.Seconds())
	})
}

var serverUpDesc = prometheus.NewDesc("pyrun_mcp_server_up",
	"Code mode: 1 when pyrun is connected to the MCP server, 0 while it connects or is down.",
	[]string{"server"}, nil)

var messagesRefusedDesc = prometheus.NewDesc("pyrun_mcp_messages_refused_total",
	"Code mode: messages from an MCP server that pyrun refused, by server and reason: too-large (past max_tool_message) or malformed (not a JSON-RPC message). Each failed the tool call it answered, if any; the connection was kept.",
	[]string{"server", "reason"}, nil)

type hubCollector struct{ hub *codemode.Hub }

func (c *hubCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serverUpDesc
	ch <- messagesRefusedDesc
}

func (c *hubCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.hub.Stats() {
		up := 0.0
		if s.State == "connected" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(serverUpDesc, prometheus.GaugeValue, up, s.Server)
		for _, r := range codemode.RefusedReasons {
			ch <- prometheus.MustNewConstMetric(messagesRefusedDesc, prometheus.CounterValue, float64(s.Refused[r]), s.Server, r)
		}
	}
}

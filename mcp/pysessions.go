package mcp

// Python sessions on the tool: the session_id and end_session arguments,
// the tool description's word on lifetimes, and the errors of calls that
// name a session. They are not MCP sessions (sessions.go): a Python session
// is a handle the server mints and the client passes back as an argument,
// so it works the same over stdio, stateful and stateless HTTP (docs/contract.md
// section 8). The sessions themselves are supervisor/sessions'.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// SessionRunner runs calls in Python sessions; *sessions.Manager is one.
type SessionRunner interface {
	Run(ctx context.Context, c sessions.Call, ev supervisor.Events) (supervisor.Result, error)
}

// SessionOptions describe Python sessions to clients.
type SessionOptions struct {
	Idle   time.Duration // a session ends after this long without a call
	MaxAge time.Duration // and this long after it started
	Max    int           // open sessions at once
	// IdleCPU is the share of a CPU a session's code may use between its
	// calls (--idle-cpu); 0: the description does not say.
	IdleCPU float64
	// Durable: sessions have checkpoints (--session-store), so a lost
	// worker rolls a session back instead of ending it, and "fork:ID"
	// copies one (docs/sessions.md).
	Durable bool
}

// idleCPUText is the description's clause on the CPU a session may use
// between calls, when its code can leave what running; "" when it cannot.
func idleCPUText(o SessionOptions, what string) string {
	if o.IdleCPU <= 0 || what == "" {
		return ""
	}
	return fmt.Sprintf(", or when code it left running (%s) keeps using more than %.0f%% of a CPU between calls", what, 100*o.IdleCPU)
}

// maxSessionID bounds a session_id argument; ids pyrun mints are an
// instance name of at most 63 characters, a dot and 32 hex digits.
const maxSessionID = 128

// UseSessions serves session_id and end_session with r. Without it, a
// call that names a session gets a tool error.
func (s *Server) UseSessions(r SessionRunner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = r
}

func (s *Server) sessionRunner() SessionRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

// checkSessionArgs checks what parseArgsFor cannot: end_session needs a
// session to end.
func checkSessionArgs(a toolArgs) error {
	if a.EndSession && a.SessionID == nil {
		return errors.New(`invalid arguments: end_session needs the session_id of the session to end`)
	}
	return nil
}

// runInSession runs a call of l's tool that names a session.
func (s *Server) runInSession(ctx context.Context, l Language, a toolArgs, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	r := s.sessionRunner()
	if r == nil {
		return supervisor.Result{}, fmt.Errorf("this pyrun does not keep %s sessions; call without session_id", l.Title)
	}
	return r.Run(ctx, sessions.Call{Session: *a.SessionID, End: a.EndSession, Job: job}, ev)
}

// sessionError is the tool error of a session call that did not run. Each
// says what happened and how to go on.
func sessionError(err error) error {
	switch {
	case errors.Is(err, sessions.ErrUnknown), errors.Is(err, sessions.ErrEnded),
		errors.Is(err, sessions.ErrExpired), errors.Is(err, sessions.ErrLost):
		return fmt.Errorf(`%w; start a new session with session_id "new"`, err)
	}
	return err
}

// sessionsDescription is Python's tool description's paragraph on
// sessions; leaves is what its code can leave running between calls.
func sessionsDescription(o SessionOptions, leaves string) string {
	if o.Max <= 0 {
		return "Each call starts from fresh globals and an empty working directory; nothing is kept between calls, so each call must be self-contained.\n"
	}
	if o.Durable {
		return fmt.Sprintf(`Without session_id, each call starts from fresh globals and an empty working directory, and nothing is kept between calls.
With session_id "new", the call starts a Python session: globals, imports, loaded packages, files in the working directory and running asyncio tasks last across its calls, as in a notebook. The result gives the session_id (in <session_id> and structuredContent.session_id); pass it in the next calls to continue, and end_session: true when done. A session's calls run one at a time, in order. session_id "fork:ID" starts a new session as a copy of session ID's state.
pyrun keeps a checkpoint of each session a moment after its calls: when a call kills its worker (a time limit the interrupt cannot stop, memory, a crash), the session goes back to its last checkpoint, and the result says so (structuredContent.checkpoint names the call whose state it has). A session ends after %s without a call, %s after it started, or when it is ended%s; a call with its id is then an error; start a new session then. At most %d sessions can be open at once.
`, shortDuration(o.Idle), shortDuration(o.MaxAge), idleCPUText(o, leaves), o.Max)
	}
	return fmt.Sprintf(`Without session_id, each call starts from fresh globals and an empty working directory, and nothing is kept between calls.
With session_id "new", the call starts a Python session: globals, imports, loaded packages, files in the working directory and running asyncio tasks last across its calls, as in a notebook. The result gives the session_id (in <session_id> and structuredContent.session_id); pass it in the next calls to continue, and end_session: true when done. A session's calls run one at a time, in order.
A session ends after %s without a call, %s after it started, when it is ended, when pyrun restarts, when a call kills its worker (a time limit the interrupt cannot stop, memory, a crash)%s: its state is then gone, and a call with its id is an error; start a new session then. At most %d sessions can be open at once.
`, shortDuration(o.Idle), shortDuration(o.MaxAge), idleCPUText(o, leaves), o.Max)
}

// InstrumentSessions returns a SessionRunner that runs calls on r and
// counts and times them with the stateless calls (pyrun_calls_total, ...).
func (m *Metrics) InstrumentSessions(r SessionRunner) SessionRunner {
	return &instrumentedSessions{r: r, m: m}
}

type instrumentedSessions struct {
	r SessionRunner
	m *Metrics
}

func (i *instrumentedSessions) Run(ctx context.Context, c sessions.Call, ev supervisor.Events) (supervisor.Result, error) {
	return i.m.observed(ctx, c.Job, func() (supervisor.Result, error) { return i.r.Run(ctx, c, ev) })
}

// CountPythonSessions adds the Python sessions' figures, read from stats
// at each scrape: pyrun_python_sessions (open now), and the sessions
// started, failed to start and ended (by reason) since pyrun started.
func (m *Metrics) CountPythonSessions(stats func() sessions.Stats) {
	_ = m.reg.Register(&sessionCollector{stats: stats})
}

type sessionCollector struct {
	stats func() sessions.Stats
}

var (
	pySessionsDesc = prometheus.NewDesc("pyrun_python_sessions",
		"Open Python sessions (state kept across calls).", nil, nil)
	pySessionStartsDesc = prometheus.NewDesc("pyrun_python_session_starts_total",
		"Python sessions started.", nil, nil)
	pySessionStartFailuresDesc = prometheus.NewDesc("pyrun_python_session_start_failures_total",
		"New Python sessions whose worker did not start.", nil, nil)
	pySessionEndsDesc = prometheus.NewDesc("pyrun_python_session_ends_total",
		"Python sessions ended, by reason: ended (by the client), idle, max-age, lost (the worker was killed or died), shutdown, idle-cpu (its code kept using more CPU between calls than --idle-cpu allows).",
		[]string{"reason"}, nil)
	pySessionSparesDesc = prometheus.NewDesc("pyrun_python_session_spares",
		"Workers started ahead for new Python sessions (--session-spares), ready now.", nil, nil)
	pySessionSpareHitsDesc = prometheus.NewDesc("pyrun_python_session_spare_hits_total",
		"New Python sessions that got a worker started ahead, without waiting for a start of their own.", nil, nil)
	pySessionWorkersDesc = prometheus.NewDesc("pyrun_python_session_workers",
		"Session workers holding Python sessions as namespaces (--session-worker shared), each one client's.", nil, nil)
	pySessionWorkerStartsDesc = prometheus.NewDesc("pyrun_python_session_worker_starts_total",
		"Workers that became a client's session worker (--session-worker shared).", nil, nil)
	pySessionPlacedDesc = prometheus.NewDesc("pyrun_python_session_placed_total",
		"New Python sessions placed on a session worker of their client's that had room: no worker started for them.", nil, nil)
	pySessionWorkerRefusalsDesc = prometheus.NewDesc("pyrun_python_session_worker_refusals_total",
		"New Python sessions, and restores from checkpoints, refused because --max-session-workers session workers held other clients' sessions, or the client's held --client-max-session-workers.", nil, nil)
	pySessionCheckpointsDesc = prometheus.NewDesc("pyrun_python_session_checkpoints_total",
		"Checkpoints of Python sessions kept in --session-store.", nil, nil)
	pySessionCheckpointFailuresDesc = prometheus.NewDesc("pyrun_python_session_checkpoint_failures_total",
		"Checkpoints of Python sessions not taken: refused (native code, past --max-checkpoint) or failed.", nil, nil)
	pySessionRestoresDesc = prometheus.NewDesc("pyrun_python_session_restores_total",
		"Python sessions continued from a checkpoint after their worker was lost.", nil, nil)
	pySessionForksDesc = prometheus.NewDesc("pyrun_python_session_forks_total",
		"Python sessions started as a copy of another (session_id fork:ID).", nil, nil)
	pySessionMovesDesc = prometheus.NewDesc("pyrun_python_session_moves_total",
		"Python sessions moved between pyrun instances that share a --session-store: in (taken over here), out (handed over to another instance).",
		[]string{"direction"}, nil)
	pySessionMoveTimeoutsDesc = prometheus.NewDesc("pyrun_python_session_move_timeouts_total",
		"Calls refused because the instance serving their Python session did not hand it over within --session-move-wait.", nil, nil)
)

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, pySessionsDesc, pySessionStartsDesc, pySessionStartFailuresDesc, pySessionEndsDesc,
		pySessionSparesDesc, pySessionSpareHitsDesc, pySessionWorkersDesc, pySessionWorkerStartsDesc,
		pySessionPlacedDesc, pySessionWorkerRefusalsDesc, pySessionCheckpointsDesc, pySessionCheckpointFailuresDesc,
		pySessionRestoresDesc, pySessionForksDesc, pySessionMovesDesc, pySessionMoveTimeoutsDesc)
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(pySessionsDesc, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(pySessionStartsDesc, prometheus.CounterValue, float64(s.Starts))
	ch <- prometheus.MustNewConstMetric(pySessionStartFailuresDesc, prometheus.CounterValue, float64(s.StartFailures))
	for _, r := range sessions.EndReasons {
		ch <- prometheus.MustNewConstMetric(pySessionEndsDesc, prometheus.CounterValue, float64(s.Ends[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(pySessionSparesDesc, prometheus.GaugeValue, float64(s.Spares))
	ch <- prometheus.MustNewConstMetric(pySessionSpareHitsDesc, prometheus.CounterValue, float64(s.SpareHits))
	ch <- prometheus.MustNewConstMetric(pySessionWorkersDesc, prometheus.GaugeValue, float64(s.Hosts))
	ch <- prometheus.MustNewConstMetric(pySessionWorkerStartsDesc, prometheus.CounterValue, float64(s.HostStarts))
	ch <- prometheus.MustNewConstMetric(pySessionPlacedDesc, prometheus.CounterValue, float64(s.Placed))
	ch <- prometheus.MustNewConstMetric(pySessionWorkerRefusalsDesc, prometheus.CounterValue, float64(s.HostRefusals))
	ch <- prometheus.MustNewConstMetric(pySessionCheckpointsDesc, prometheus.CounterValue, float64(s.Checkpoints))
	ch <- prometheus.MustNewConstMetric(pySessionCheckpointFailuresDesc, prometheus.CounterValue, float64(s.CheckpointFailures))
	ch <- prometheus.MustNewConstMetric(pySessionRestoresDesc, prometheus.CounterValue, float64(s.Restores))
	ch <- prometheus.MustNewConstMetric(pySessionForksDesc, prometheus.CounterValue, float64(s.Forks))
	ch <- prometheus.MustNewConstMetric(pySessionMovesDesc, prometheus.CounterValue, float64(s.MovesIn), "in")
	ch <- prometheus.MustNewConstMetric(pySessionMovesDesc, prometheus.CounterValue, float64(s.MovesOut), "out")
	ch <- prometheus.MustNewConstMetric(pySessionMoveTimeoutsDesc, prometheus.CounterValue, float64(s.MoveTimeouts))
}

// shortDuration writes d without its zero tails: 10m, 8h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

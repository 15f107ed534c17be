// Package sessions keeps sessions of a language: interpreter state that lasts
// across calls. Each session owns one worker of its own (started on demand,
// never taken from the stateless pool), has a server-minted id, belongs to
// the client that started it, runs its calls one at a time in the order
// they arrive, and ends when its client ends it, when it has been idle or
// alive too long, when its worker is lost, or when pyrun stops.
//
//	m := sessions.New(sessions.Options{Instance: "box-1", Start: start, Log: log})
//	defer m.Close(ctx)
//	res, err := m.Run(ctx, sessions.Call{Session: sessions.New, Job: job}, ev)
//	res, err = m.Run(ctx, sessions.Call{Session: res.SessionID, Job: next}, ev)
//
// The package knows workers through the small Worker interface
// (*supervisor.Dedicated is one) and nothing of MCP.
package sessions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
)

// NewSession is the session id that asks for a new session.
const NewSession = "new"

// The conditions a call to a session can fail on, before or instead of
// running. Each error a Manager returns wraps one, names the Manager's
// language ("unknown R session") and says what happened to that session.
var (
	// ErrUnknown: no session of that id is known here, or it belongs to
	// another client (who cannot tell the two apart).
	ErrUnknown = condition("unknown %ssession")
	// ErrEnded: the session was ended by its client.
	ErrEnded = condition("the %ssession has ended")
	// ErrExpired: the session was idle too long or reached its maximum age.
	ErrExpired = condition("the %ssession has expired")
	// ErrLost: the session's worker was killed or died, and its state with it.
	ErrLost = condition("the %ssession was lost")
	// ErrTooMany: a new session would pass --max-sessions or
	// --client-max-sessions.
	ErrTooMany = condition("too many %ssessions")
	// ErrOtherInstance: the id names a session of another pyrun instance.
	ErrOtherInstance = condition("the %ssession belongs to another pyrun instance")
	// ErrClosed: pyrun is shutting down.
	ErrClosed = condition("pyrun is shutting down; its %ssessions have ended")
	// ErrStart: no worker could be started for the new session.
	ErrStart = condition("no worker could be started for the %ssession")
	// ErrNoRoom: the session must be restored from its checkpoint onto a
	// worker of its own, and Limits.MaxHosts are running; it stays, with
	// its checkpoint, for a later call.
	ErrNoRoom = condition("no session worker is free to restore the %ssession")
)

// condition is an ErrXxx: its words, with a %s where the language's name
// goes (followed by a space), which its own Error leaves out.
type condition string

func (c condition) Error() string { return fmt.Sprintf(string(c), "") }

// sessionError is an error of a condition, worded for a Manager's
// language.
type sessionError struct {
	cond condition
	msg  string
}

func (e *sessionError) Error() string { return e.msg }
func (e *sessionError) Unwrap() error { return e.cond }

// errorf is an error of cond in m's language: cond's words, then
// format's.
func (m *Manager) errorf(cond error, format string, args ...any) error {
	c := cond.(condition)
	return &sessionError{cond: c, msg: fmt.Sprintf(string(c), m.lang+" ") + fmt.Sprintf(format, args...)}
}

// Reasons a session ends, as Stats.Ends counts them and logs say.
const (
	EndClient   = "ended"    // end_session
	EndIdle     = "idle"     // no call for Limits.Idle
	EndMaxAge   = "max-age"  // older than Limits.MaxAge
	EndLost     = "lost"     // its worker was killed or died
	EndShutdown = "shutdown" // pyrun stopped
	// EndIdleCPU: its code kept using more CPU between calls than
	// --idle-cpu allows (a task or timer left running), and its worker was
	// killed (supervisor.LostIdleCPU).
	EndIdleCPU = "idle-cpu"
)

// EndReasons lists every end reason, for metrics.
var EndReasons = []string{EndClient, EndIdle, EndMaxAge, EndLost, EndShutdown, EndIdleCPU}

// lostReason is the end reason of a session whose worker was lost for why.
func lostReason(why string) string {
	if strings.HasPrefix(why, supervisor.LostIdleCPU) {
		return EndIdleCPU
	}
	return EndLost
}

// Worker is what a session runs its calls on, one at a time.
type Worker interface {
	Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error)
	// Lost says why the worker can take no more calls; "" while it can.
	Lost() string
	// Close stops the worker and returns once it has.
	Close()
	// Kill stops the worker at once, with a running call.
	Kill(why string)
}

// Limits bound sessions. Zero fields mean their defaults.
type Limits struct {
	Idle      time.Duration // a session ends after this long without a call; 0: 10m
	MaxAge    time.Duration // and this long after it started; 0: 8h
	Max       int           // open sessions at once; 0: 4
	ClientMax int           // open sessions of one client (not Options.Anonymous); 0: 2
	// Spares are workers started ahead for new sessions (spare.go), once
	// a session has started; 0: DefaultSpares, negative: none.
	Spares int
	// MaxHosts bounds the shared workers that hold sessions
	// (Options.PerHost), spares included; 0: DefaultMaxHosts.
	MaxHosts int
	// ClientMaxHosts bounds the shared workers that hold one client's
	// sessions (not Options.Anonymous's), those restored from checkpoints
	// and forks included, so that one client's sessions, each restored
	// onto a worker of its own, never take every worker; 0: half of
	// MaxHosts, rounded up.
	ClientMaxHosts int
}

// Default limits.
const (
	DefaultIdle      = 10 * time.Minute
	DefaultMaxAge    = 8 * time.Hour
	DefaultMax       = 4
	DefaultClientMax = 2
	DefaultMaxHosts  = 4
)

func (l Limits) withDefaults() Limits {
	l.Idle = positiveOr(l.Idle, DefaultIdle)
	l.MaxAge = positiveOr(l.MaxAge, DefaultMaxAge)
	l.Max = positiveOr(l.Max, DefaultMax)
	l.ClientMax = positiveOr(l.ClientMax, DefaultClientMax)
	l.Spares = cmp.Or(l.Spares, DefaultSpares)
	l.MaxHosts = positiveOr(l.MaxHosts, DefaultMaxHosts)
	l.ClientMaxHosts = positiveOr(l.ClientMaxHosts, (l.MaxHosts+1)/2)
	return l
}

// positiveOr is v, or def when v is not positive.
func positiveOr[T ~int | ~int64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Options configure a Manager. They are copied.
type Options struct {
	// Instance names this pyrun; ids start with it (CheckInstance).
	Instance string
	// Start starts a worker for a new session; it calls exited once the
	// worker's process has ended, however that happened.
	Start  func(ctx context.Context, exited func()) (Worker, error)
	Limits Limits
	// Language is how errors name the sessions' language ("R": "unknown
	// R session"); "": Python.
	Language string
	// Anonymous is the client of calls without credentials: its sessions
	// are not bounded by ClientMax, and any anonymous call may use them
	// (their ids are the secret). "": every client is bounded and owns
	// its sessions.
	Anonymous string
	Log       hclog.Logger
	// PerHost > 0 keeps the sessions of a client as namespaces on shared
	// workers of that client's, each holding up to PerHost sessions
	// (shared.go); 0: each session has a worker of its own.
	PerHost int
	// SpareAfter, if not nil, returns once the first spare may start
	// (with PerHost, one is started ahead from the start): pyrun waits
	// for its pool's workers, so that the two starts do not share the
	// cores. It returns early when ctx is done.
	SpareAfter func(ctx context.Context)
	// Checkpoints, when not nil, keeps checkpoints of the sessions
	// (durable.go): taken CheckpointDelay (0: DefaultCheckpointDelay)
	// after a call, and a session whose worker is lost continues from its
	// last one.
	Checkpoints     Checkpointer
	CheckpointDelay time.Duration
	// MoveWait bounds how long a call waits for another instance to hand
	// its session over (lease.go); 0: DefaultMoveWait.
	MoveWait time.Duration
}

// Call is one call to a session.
type Call struct {
	// Session is NewSession or the id of an open session.
	Session string
	// End ends the session after the code, if any, has run.
	End bool
	// Job is the code to run; Job.Client is who calls, and owns what it
	// starts. An empty Job.Code with End only ends the session.
	Job supervisor.Job
}

// Stats is a snapshot of the sessions.
type Stats struct {
	Open     int // sessions with a worker
	Starting int // new sessions whose worker is starting
	Starts   int64
	// StartFailures counts new sessions whose worker did not start.
	StartFailures int64
	Ends          map[string]int64 // by reason (EndClient, ...)
	Limits        Limits
	// Spares are workers waiting for the next new session; SpareHits
	// counts the new sessions that got one.
	Spares         int
	SparesStarting int
	SpareHits      int64
	// Hosts are the shared workers that hold sessions (Options.PerHost);
	// HostStarts counts the workers that became a client's host, Placed
	// the new sessions placed on a host that had room, with no worker
	// start.
	Hosts      int
	HostStarts int64
	Placed     int64
	// HostRefusals counts new sessions, and restores, refused for want of a host
	// (Limits.MaxHosts).
	HostRefusals int64
	// Checkpoints taken, those that failed or were refused, and sessions
	// continued from one after their worker was lost (durable.go).
	Checkpoints, CheckpointFailures, Restores int64
	Forks                                     int64 // sessions started as a copy of another
	// Sessions moved here from another instance, handed over to one, and
	// calls that waited in vain for a hand-over (lease.go).
	MovesIn, MovesOut, MoveTimeouts int64
}

// Manager keeps the sessions of one pyrun. Its methods are safe for
// concurrent use.
type Manager struct {
	opts Options
	log  hclog.Logger
	lang string // Options.Language, or Python

	wake chan struct{} // tells the expiry loop to look again
	stop chan struct{} // closed by Close: the expiry loop ends
	// leaseStop is closed at the end of Close: the leases are renewed
	// while sessions drain, and stop then (lease.go).
	leaseStop chan struct{}
	wg        sync.WaitGroup
	// closing is cancelled by Close: a spare's start is aborted.
	closing       context.Context
	cancelClosing context.CancelFunc

	mu       sync.Mutex
	limits   Limits
	open     map[string]*session
	starting map[string]int // new sessions being started, by client
	gone     map[string]tomb
	// dormant are sessions of a previous run with checkpoints in the
	// store, waiting for a call (durable.go, adoptSaved).
	dormant    map[string]Saved
	goneOrder  []string // ids in gone, oldest first
	running    int      // calls on a worker now
	closed     bool
	idleSignal chan struct{} // closed when running reaches 0 after Close
	counts     Stats
	spares     []spareWorker // started ahead for new sessions, oldest first
	// sparesStarting counts spares being started; spareDone is closed and
	// replaced when one ends its start, ready or not.
	sparesStarting int
	spareDone      chan struct{}
	hosts          map[string][]*host // shared workers, by client (shared.go)
	hostsPending   int                // new sessions and restores starting a host
	hostsPendingOf map[string]int     // hostsPending, by client
}

// session is one open session. Its fields are guarded by Manager.mu.
type session struct {
	id, owner string
	w         Worker
	started   time.Time
	lastUsed  time.Time
	calls     int
	busy      int  // calls running or waiting their turn
	held      bool // a call has the turn
	line      []chan struct{}
	// Checkpoints (durable.go): the calls the last one covers (0: none),
	// the timer that takes the next, and why the session cannot have one.
	ckptCalls  int
	ckptTimer  *time.Timer
	notDurable string
	// Leases (lease.go): the session is being taken over from the store
	// (a placeholder), it was handed over or lost to another instance, an
	// instance asked for it, its lease was lost.
	adopting, moved, moveWanted, leaseLost bool
}

// tomb remembers an ended session, to say why a later call fails.
type tomb struct {
	owner string
	err   error
}

// maxTombs bounds the ended sessions remembered; an id older than that is
// reported as unknown.
const maxTombs = 4096

// New starts a Manager and its expiry loop.
func New(o Options) *Manager {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	m := &Manager{
		opts:     o,
		log:      o.Log,
		lang:     cmp.Or(o.Language, "Python"),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		limits:   o.Limits.withDefaults(),
		open:     map[string]*session{},
		starting: map[string]int{},
		gone:     map[string]tomb{},
		dormant:  map[string]Saved{},
		counts:   Stats{Ends: map[string]int64{}},

		hostsPendingOf: map[string]int{},
	}
	m.closing, m.cancelClosing = context.WithCancel(context.Background())
	m.spareDone = make(chan struct{})
	m.adoptSaved()
	m.wg.Add(1)
	go m.expire()
	if l := m.leaser(); l != nil {
		m.leaseStop = make(chan struct{})
		m.wg.Add(1)
		go m.renewLeases(l, m.leaseStop)
	}
	if o.PerHost > 0 {
		// A client's first session takes a spare: keep one from the start.
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if o.SpareAfter != nil {
				o.SpareAfter(m.closing)
			}
			m.mu.Lock()
			m.refillLocked()
			m.mu.Unlock()
		}()
	}
	return m
}

// SetLimits applies new limits, as after a config reload. Open sessions
// stay; they end by the new idle and age limits, and new sessions are
// refused while more are open than the new bounds allow.
func (m *Manager) SetLimits(l Limits) {
	m.mu.Lock()
	m.limits = l.withDefaults()
	m.mu.Unlock()
	m.kick()
}

// Limits returns the limits in force, defaults filled in.
func (m *Manager) Limits() Limits {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.limits
}

// Stats describes the sessions now.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.counts
	s.Open = len(m.open)
	s.Starting = 0
	for _, n := range m.starting {
		s.Starting += n
	}
	s.Ends = maps.Clone(m.counts.Ends)
	s.Limits = m.limits
	s.Spares, s.SparesStarting = len(m.spares), m.sparesStarting
	s.Hosts = m.hostCountLocked()
	return s
}

// Run runs a call in a session, starting the session first for
// NewSession. The result carries the session's id (Result.SessionID). A
// Python error, timeout or crash is a Result, as with the pool; a call
// that did not run gets an error wrapping one of the ErrXxx above. A call
// whose worker was lost returns its Result, which says so, and the session
// has ended.
func (m *Manager) Run(ctx context.Context, c Call, ev supervisor.Events) (supervisor.Result, error) {
	var s *session
	var err error
	if src, ok := strings.CutPrefix(c.Session, ForkPrefix); ok {
		s, err = m.start(ctx, c.Job.Client, func(ctx context.Context) (Worker, error) {
			return m.fork(ctx, src, c.Job)
		})
	} else if c.Session == NewSession {
		s, err = m.start(ctx, c.Job.Client, nil)
	} else {
		s, err = m.enter(ctx, c.Session, c.Job)
	}
	if err == nil && (c.Session == NewSession || strings.HasPrefix(c.Session, ForkPrefix)) {
		m.holdNew(ctx, s)
	}
	if err != nil {
		status := "rejected"
		if ctx.Err() != nil {
			status = "cancelled"
		}
		m.log.Info("call", c.Job.LogTrace("id", c.Job.ID, "status", status, "worker", "", "session", c.Job.Session,
			"session_id", c.Session, "client", c.Job.Client, "error", err.Error())...)
		return supervisor.Result{}, err
	}
	return m.runIn(ctx, s, c, ev)
}

// start makes a new session with a worker of its own, holding its turn:
// the one with starts, or else a spare or a new one.
func (m *Manager) start(ctx context.Context, client string, with func(context.Context) (Worker, error)) (*session, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, m.errorf(ErrClosed, "")
	}
	l := m.limits
	total, mine := m.countLocked(client)
	switch {
	case total >= l.Max:
		m.mu.Unlock()
		return nil, m.errorf(ErrTooMany, ": %d are open, the most pyrun allows (max_sessions); end one with end_session, or wait for one to expire", total)
	case client != m.opts.Anonymous && mine >= l.ClientMax:
		m.mu.Unlock()
		return nil, m.errorf(ErrTooMany, ": this client has %d open, the most one client may have (client_max_sessions); end one with end_session, or wait for one to expire", mine)
	}
	m.starting[client]++
	m.running++ // Close waits for the start, then for the call
	began := time.Now()
	var w Worker
	if with == nil {
		// A shared host of the client's with room: no worker starts.
		w = m.placeLocked(client)
	}
	// A new host, or a fork's worker (a host of its own: adoptLocked).
	newHost := w == nil && m.opts.PerHost > 0
	if newHost {
		if err := m.roomForHostLocked(client); err != nil {
			m.starting[client]--
			if m.starting[client] == 0 {
				delete(m.starting, client)
			}
			m.doneLocked()
			m.mu.Unlock()
			return nil, err
		}
		m.pendHostLocked(client, 1)
	}
	var err error
	var spare Worker
	if w == nil {
		if with == nil {
			spare, err = m.awaitSpareLocked(ctx)
		}
		m.mu.Unlock()
		w = spare
		if with != nil {
			// A session continued from a checkpoint has a worker of its own
			// (durable.go), started from it.
			w, err = with(ctx)
		} else if w == nil && err == nil {
			// A worker that dies while its session is idle ends the session at
			// once (the expiry loop looks), rather than at the next call.
			w, err = m.opts.Start(ctx, m.kick)
		}
		m.mu.Lock()
		if newHost {
			m.pendHostLocked(client, -1)
			if with == nil && err == nil && !m.closed {
				w = m.hostLocked(client, w)
			}
		}
	}
	defer m.mu.Unlock()
	if m.starting[client]--; m.starting[client] == 0 {
		delete(m.starting, client)
	}
	if err != nil {
		m.doneLocked()
		m.counts.StartFailures++
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start a new %s session: %w", m.lang, ctx.Err())
		}
		if errors.Is(err, supervisor.ErrClosed) {
			return nil, m.errorf(ErrClosed, "")
		}
		var se *sessionError
		if errors.As(err, &se) {
			return nil, err // the fork's source: unknown, ended, busy
		}
		return nil, m.errorf(ErrStart, ": %v", err)
	}
	if m.closed {
		m.doneLocked()
		m.closeWorker(w)
		return nil, m.errorf(ErrClosed, "")
	}
	now := time.Now()
	s := &session{id: m.mint(), owner: client, w: w, started: now, lastUsed: now, busy: 1, held: true}
	m.open[s.id] = s
	m.counts.Starts++
	m.log.Info("session started", "session_id", s.id, "client", client,
		"startup", now.Sub(began).Round(time.Millisecond), "open", len(m.open), "spare", spare != nil)
	m.refillLocked()
	m.kick()
	return s, nil
}

// countLocked counts the sessions open and starting, in all and of client.
// m.mu is held.
func (m *Manager) countLocked(client string) (total, mine int) {
	total = len(m.open)
	for _, s := range m.open {
		if s.owner == client {
			mine++
		}
	}
	for who, n := range m.starting {
		total += n
		if who == client {
			mine += n
		}
	}
	return total, mine
}

// enter finds a client's open session and waits for its turn.
func (m *Manager) enter(ctx context.Context, id string, job supervisor.Job) (*session, error) {
	client := job.Client
	l := m.leaser()
	if l == nil {
		// With a shared store, another instance's session moves here.
		if err := m.checkInstance(id); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	s := m.open[id]
	if _, ended := m.gone[id]; s == nil && l != nil && !m.closed && !ended && validID(id) {
		return m.adopt(ctx, l, id, client)
	}
	if s == nil {
		s = m.wakeLocked(id, client)
	}
	if s == nil || !m.owns(s.owner, client) {
		err := m.goneErrLocked(id, client)
		if s != nil {
			m.log.Warn("refused a call to another client's session", "session_id", id,
				"client", client, "owner", s.owner)
		}
		m.mu.Unlock()
		return nil, err
	}
	if m.closed {
		m.mu.Unlock()
		return nil, m.errorf(ErrClosed, "")
	}
	s.busy++
	if !s.held {
		s.held = true
		m.running++
		m.mu.Unlock()
		return s, nil
	}
	turn := make(chan struct{})
	s.line = append(s.line, turn)
	m.log.Debug("session call waits its turn", "session_id", id, "id", job.ID, "position", len(s.line))
	m.mu.Unlock()

	select {
	case <-turn:
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		if i := slices.Index(s.line, turn); i >= 0 {
			s.line = slices.Delete(s.line, i, i+1)
		} else {
			m.passLocked(s) // the turn came as the call gave up: pass it on
		}
		s.busy--
		return nil, fmt.Errorf("waiting for the %s session's previous call: %w", m.lang, ctx.Err())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.moved && !m.closed {
		// It was handed over or failed to move here meanwhile: this call
		// takes it over (again).
		m.passLocked(s)
		s.busy--
		m.mu.Unlock()
		defer m.mu.Lock()
		return m.enter(ctx, id, job)
	}
	if m.open[id] != s || m.closed {
		// The session ended while this call waited in line.
		err := m.goneErrLocked(id, client)
		if m.closed && m.open[id] == s {
			err = m.errorf(ErrClosed, "")
		}
		m.passLocked(s)
		s.busy--
		return nil, err
	}
	m.running++
	return s, nil
}

// owns says whether client may use a session of owner.
func (m *Manager) owns(owner, client string) bool { return owner == client }

// goneErrLocked is the error of a call to an id that has no open session
// of client's. m.mu is held.
func (m *Manager) goneErrLocked(id, client string) error {
	if t, ok := m.gone[id]; ok && m.owns(t.owner, client) {
		return t.err
	}
	return m.errorf(ErrUnknown, ": no %s session %q is open here", m.lang, clip(id, 80))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// runIn runs c in s, whose turn the caller holds, and passes the turn on.
func (m *Manager) runIn(ctx context.Context, s *session, c Call, ev supervisor.Events) (supervisor.Result, error) {
	job := c.Job
	job.PythonSession = s.id
	job.KeepOutput = true // a session keeps its /output/ (docs/contract.md section 9)
	job.LastCall = c.End
	var res supervisor.Result
	var err error
	var rolled *Saved // the checkpoint the session went back to
	ran := job.Code != "" || !c.End
	// A worker lost while the session was idle: its checkpoint continues it
	// (not for a call that only ends the session).
	if ran && m.restorable(s) {
		if s.w == nil {
			// A session of a previous run: its first call here restores it.
			saved, rerr := m.restore(context.WithoutCancel(ctx), s)
			if errors.Is(rerr, ErrNoRoom) {
				return m.refuseRestore(s, rerr)
			}
			if rerr != nil {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.doneLocked()
				s.busy--
				m.passLocked(s)
				e := m.errorf(ErrLost, ": session %q could not be restored from its checkpoint: %v", s.id, rerr)
				m.endLocked(s, EndLost, e)
				return supervisor.Result{SessionID: s.id}, e
			}
			_ = saved // its state is the latest: nothing was rolled back
		} else if why := s.w.Lost(); why != "" && lostReason(why) == EndLost {
			saved, rerr := m.restore(context.WithoutCancel(ctx), s)
			if errors.Is(rerr, ErrNoRoom) {
				return m.refuseRestore(s, rerr)
			}
			if rerr == nil {
				rolled = &saved
			}
		}
	}
	if ran {
		res, err = s.w.Run(ctx, job, ev)
	}
	lost := ""
	if errors.Is(err, supervisor.ErrWorkerLost) || res.Status != "" {
		lost = s.w.Lost()
	}
	restoreErr := ""
	waitsRestore := false // on its lost worker, for a later call to restore it
	if lost != "" && lostReason(lost) == EndLost && m.restorable(s) {
		if saved, rerr := m.restore(context.WithoutCancel(ctx), s); errors.Is(rerr, ErrNoRoom) {
			// The session stays, on its lost worker: its next call
			// restores it once a worker is free.
			if res.Status == "" {
				res.Status, res.Error = supervisor.StatusCrashed, err.Error()
				err = nil
			}
			res.Error = strings.TrimSuffix(res.Error, "\n") + fmt.Sprintf("\n\npyrun: the session's worker was lost (%s); %v", lost, rerr)
			lost, waitsRestore = "", true
		} else if rerr == nil {
			rolled = &saved
			if res.Status == "" {
				// The call did not run: the session goes on, this call failed.
				res.Status, res.Error = supervisor.StatusCrashed, err.Error()
				err = nil
			}
			res.Error = strings.TrimSuffix(res.Error, "\n") + fmt.Sprintf("\n\npyrun: the session's worker was lost (%s); the session continues from its checkpoint after call %d: what later calls did is undone", lost, saved.AfterCall)
			lost = ""
		} else {
			restoreErr = "; its checkpoint could not be restored: " + rerr.Error()
		}
	} else if lost != "" {
		m.mu.Lock()
		if s.notDurable != "" {
			restoreErr = "; it had no checkpoint: " + s.notDurable
		}
		m.mu.Unlock()
	}
	if rolled != nil {
		res.Checkpoint = &supervisor.CheckpointRef{AfterCall: rolled.AfterCall, Taken: rolled.Taken}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	m.doneLocked()
	s.calls++
	s.lastUsed = time.Now()
	s.busy--
	m.passLocked(s)
	m.kick() // its idle time starts now
	res.SessionID = s.id
	switch {
	case lost != "":
		e := m.errorf(ErrLost, ": session %q ended because its worker was lost (%s), and its state with it%s", s.id, lost, restoreErr)
		m.endLocked(s, lostReason(lost), e)
		if res.Status == "" {
			return res, e
		}
		res.Error = strings.TrimSuffix(res.Error, "\n") + "\n\npyrun: " + e.Error() +
			`; the next call with this session_id gets an error: start a new session with session_id "new"`
		return res, err
	case c.End:
		m.endLocked(s, EndClient, m.errorf(ErrEnded, ": session %q was ended by its client (end_session)", s.id))
	case time.Since(s.started) >= m.limits.MaxAge:
		m.endLocked(s, EndMaxAge, m.ageErr(s))
	}
	if !ran {
		res.Status = supervisor.StatusSuccess
	}
	if m.open[s.id] == s {
		switch {
		case waitsRestore:
			// Nothing to checkpoint: its last checkpoint is its state.
		case s.leaseLost && !s.held:
			m.movedAwayLocked(s)
		case s.moveWanted && !m.closed:
			m.handOverLocked(s)
		default:
			m.scheduleCheckpointLocked(s)
		}
	}
	return res, err
}

// refuseRestore ends s's call, whose turn it holds, with err (ErrNoRoom):
// the session stays as it is, its checkpoint kept, for a later call.
func (m *Manager) refuseRestore(s *session, err error) (supervisor.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doneLocked()
	s.busy--
	m.passLocked(s)
	m.kick()
	return supervisor.Result{SessionID: s.id}, err
}

// restorable says whether s has a checkpoint to continue from.
func (m *Manager) restorable(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opts.Checkpoints != nil && s.ckptCalls > 0
}

func (m *Manager) ageErr(s *session) error {
	return m.errorf(ErrExpired, ": session %q reached its maximum age of %s (session_max_age)", s.id, m.limits.MaxAge)
}

// doneLocked counts a call (or start) off, telling a waiting Close when it
// was the last. m.mu is held.
func (m *Manager) doneLocked() {
	m.running--
	if m.closed && m.running == 0 && m.idleSignal != nil {
		close(m.idleSignal)
		m.idleSignal = nil
	}
}

// passLocked hands s's turn to the next call in line, or frees it. m.mu
// is held.
func (m *Manager) passLocked(s *session) {
	if len(s.line) > 0 {
		next := s.line[0]
		s.line = s.line[1:]
		close(next)
		return
	}
	s.held = false
}

// endLocked ends s: it is forgotten but for why, and its worker stops in
// the background. m.mu is held.
func (m *Manager) endLocked(s *session, reason string, why error) {
	if m.open[s.id] != s {
		return
	}
	delete(m.open, s.id)
	m.gone[s.id] = tomb{owner: s.owner, err: why}
	m.goneOrder = append(m.goneOrder, s.id)
	if len(m.goneOrder) > maxTombs {
		delete(m.gone, m.goneOrder[0])
		m.goneOrder = m.goneOrder[1:]
	}
	m.counts.Ends[reason]++
	if s.ckptTimer != nil {
		s.ckptTimer.Stop()
		s.ckptTimer = nil
	}
	if s.ckptCalls > 0 && reason != EndShutdown {
		// At shutdown they stay, for the next run (durable.go).
		m.deleteCheckpointsLocked(s)
	} else {
		m.releaseLocked(s.id)
	}
	m.log.Info("session ended", "session_id", s.id, "reason", reason, "client", s.owner,
		"calls", s.calls, "age", time.Since(s.started).Round(time.Millisecond), "open", len(m.open))
	m.closeWorker(s.w)
}

// closeWorker stops w in the background. m.mu is held.
func (m *Manager) closeWorker(w Worker) {
	if w == nil {
		return // a session of a previous run, not restored yet
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		w.Close()
	}()
}

func (m *Manager) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

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
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
)

// NewSession is the session id that asks for a new session.
const NewSession = "new"

// Worker is what a session runs its calls on, one at a time.
type Worker interface {
	Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error)
	// Lost says why the worker can take no more calls; "" while it can.
	Lost() string
	// TryLost is Lost without waiting for a call in progress: "" also
	// while one runs (a shared worker is asked while another session's
	// call may run on it).
	TryLost() string
	// Current says whether the worker starts as a new one would now: a
	// spare or a shared worker that is not serves no new session.
	Current() bool
	// Checkpoint takes a checkpoint of the worker's state and gives it to
	// take while the worker is held; an error wrapping
	// supervisor.ErrNotDurable when it cannot be taken.
	Checkpoint(ctx context.Context, take func(*supervisor.Image) error) error
	// CheckpointSince is Checkpoint for a checkpoint the caller keeps: it
	// may be an increment to the one named since (Image.Since), which the
	// caller holds; a since the worker does not know gives the whole
	// state.
	CheckpointSince(ctx context.Context, since string, take func(*supervisor.Image) error) error
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

// Validate checks limits a user set, where a zero is a value and not the
// default, naming each setting as pyrun's flags and config keys do
// (docs/configuration.md, Sessions). Spares is pyrun's to check (its 0
// means none there).
func (l Limits) Validate() error {
	switch {
	case l.Idle <= 0:
		return fmt.Errorf("session-idle must be positive, not %s", l.Idle)
	case l.MaxAge <= 0:
		return fmt.Errorf("session-max-age must be positive, not %s", l.MaxAge)
	case l.Max < 1 || l.Max > 4096:
		return fmt.Errorf("max-sessions must be between 1 and 4096, not %d", l.Max)
	case l.ClientMax < 1 || l.ClientMax > 4096:
		return fmt.Errorf("client-max-sessions must be between 1 and 4096, not %d", l.ClientMax)
	case l.MaxHosts < 1 || l.MaxHosts > 256:
		return fmt.Errorf("max-session-workers must be between 1 and 256, not %d", l.MaxHosts)
	case l.ClientMaxHosts < 0 || l.ClientMaxHosts > 256:
		return fmt.Errorf("client-max-session-workers must be between 0 and 256, not %d", l.ClientMaxHosts)
	case l.Spares > 16: // -1: none
		return fmt.Errorf("session-spares must be between 0 and 16, not %d", l.Spares)
	}
	return nil
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
	// Leases, when not nil, are the store's leases of sessions, which
	// several instances share: the Manager holds the lease of each
	// session it serves (lease.go). checkpoint.Keeper is both this and
	// Checkpoints.
	Leases Leaser
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

// Manager keeps the sessions of one pyrun: the table of open sessions
// and their turns. Where a new session's worker comes from is its
// placement's (placement.go). Its methods are safe for concurrent use.
type Manager struct {
	*core
	opts    Options
	place   *placement
	durable *durability
	leases  *leases // nil: none are held

	stop chan struct{} // closed by Close: the expiry loop ends
	// leaseStop is closed at the end of Close: the leases are renewed
	// while sessions drain, and stop then (lease.go).
	leaseStop chan struct{}

	// Guarded by core.mu:
	open     map[string]*session
	starting map[string]int // new sessions being started, by client
	gone     map[string]tomb
	// dormant are sessions of a previous run with checkpoints in the
	// store, waiting for a call (dormant.go).
	dormant    map[string]Saved
	goneOrder  []string      // ids in gone, oldest first
	running    int           // calls on a worker now
	idleSignal chan struct{} // closed when running reaches 0 after Close
	counts     Stats
}

// session is one open session. Its fields are guarded by core.mu.
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
		core:     newCore(o.Log, cmp.Or(o.Language, "Python"), o.Limits),
		opts:     o,
		stop:     make(chan struct{}),
		open:     map[string]*session{},
		starting: map[string]int{},
		gone:     map[string]tomb{},
		dormant:  map[string]Saved{},
		counts:   Stats{Ends: map[string]int64{}},
	}
	m.place = newPlacement(m.core, o)
	m.durable = newDurability(m.core, o, m.place, m)
	m.leases = newLeases(m.core, o)
	m.adoptSaved()
	m.wg.Add(1)
	go m.expire()
	if m.leases != nil {
		m.leaseStop = make(chan struct{})
		m.wg.Add(1)
		go m.renewLeases(m.leaseStop)
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
	s.Starting = m.startingLocked()
	s.Ends = maps.Clone(m.counts.Ends)
	s.Limits = m.limits
	m.place.statsLocked(&s)
	m.durable.statsLocked(&s)
	m.leases.statsLocked(&s)
	return s
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

// startingLocked counts the new sessions being started. m.mu is held.
func (m *Manager) startingLocked() int {
	n := 0
	for _, k := range m.starting {
		n += k
	}
	return n
}

// refillLocked starts spares for the next sessions, while there is room
// for as many more. m.mu is held.
func (m *Manager) refillLocked() {
	m.place.refillLocked(m.limits.Max - len(m.open) - m.startingLocked())
}

// enter finds a client's open session and waits for its turn.
func (m *Manager) enter(ctx context.Context, id string, job supervisor.Job) (*session, error) {
	client := job.Client
	if m.leases == nil {
		// With a shared store, another instance's session moves here.
		if err := m.checkInstance(id); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	s := m.open[id]
	if _, ended := m.gone[id]; s == nil && m.leases != nil && !m.closed && !ended && validID(id) {
		return m.adopt(ctx, id, client)
	}
	if s == nil {
		s = m.wakeLocked(id, client)
	}
	if s == nil || !owns(s.owner, client) {
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
func owns(owner, client string) bool { return owner == client }

// goneErrLocked is the error of a call to an id that has no open session
// of client's. m.mu is held.
func (m *Manager) goneErrLocked(id, client string) error {
	if t, ok := m.gone[id]; ok && owns(t.owner, client) {
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

// doneLocked counts a call (or start) off, telling a waiting Close when it
// was the last. m.mu is held.
func (m *Manager) doneLocked() {
	m.running--
	if m.closed && m.running == 0 && m.idleSignal != nil {
		close(m.idleSignal)
		m.idleSignal = nil
	}
}

// isOpenLocked says whether s is still open here. m.mu is held.
func (m *Manager) isOpenLocked(s *session) bool { return m.open[s.id] == s }

// openLocked yields the sessions open here. m.mu is held.
func (m *Manager) openLocked() iter.Seq[*session] { return maps.Values(m.open) }

// holdLocked takes the turn of s, which no call has, for work of the
// Manager's own (a checkpoint, a hand-over). m.mu is held.
func (m *Manager) holdLocked(s *session) {
	s.busy++
	s.held = true
	m.running++
}

// yieldLocked ends the work that had s's turn, and hands the turn on.
// m.mu is held.
func (m *Manager) yieldLocked(s *session) {
	m.doneLocked()
	s.busy--
	m.passLocked(s)
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

// Validate checks the settings a user set (pyrun binds its flags to
// Limits, CheckpointDelay and MoveWait), where a zero is a value and not
// the default, naming each as pyrun's flags and config keys do.
func (o Options) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	switch {
	case o.CheckpointDelay <= 0:
		return fmt.Errorf("checkpoint-delay must be positive, not %s", o.CheckpointDelay)
	case o.MoveWait <= 0:
		return fmt.Errorf("session-move-wait must be positive, not %s", o.MoveWait)
	}
	return nil
}

package sessions

// Durable sessions (docs/sessions.md): a checkpoint of a session's worker
// taken off the call's path, after its calls, and the session continued
// from it when its worker is lost.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Checkpointer takes, keeps and restores sessions' checkpoints
// (supervisor/checkpoint.Keeper is one).
type Checkpointer interface {
	// Take takes one checkpoint of w, the worker of the first session saved
	// describes, and keeps it as the record of each session saved
	// describes (sessions of one shared worker: each record is restored to
	// its own session's namespace only). An error wrapping
	// supervisor.ErrNotDurable: the worker cannot be checkpointed as it is
	// (native code, too large).
	Take(ctx context.Context, w Worker, saved []Saved) error
	// Restore starts a worker from the latest intact checkpoint of session
	// id, and says what it holds.
	Restore(ctx context.Context, id string, exited func()) (Worker, Saved, error)
	// Delete removes the session's checkpoints.
	Delete(ctx context.Context, id string) error
	// Fork starts a worker whose state is a copy of w's now.
	Fork(ctx context.Context, w Worker, exited func()) (Worker, error)
	// List describes the sessions with checkpoints in the store.
	List(ctx context.Context) ([]Saved, error)
}

// Saved describes a session's checkpoint.
type Saved struct {
	ID, Owner string
	// AfterCall is how many of the session's calls the checkpoint covers:
	// the state is the one after that call.
	AfterCall int
	Started   time.Time // when the session started
	LastUsed  time.Time
	Taken     time.Time // when the checkpoint was taken
	// Namespace: the checkpoint is of a shared session worker, taken for
	// the session of this namespace there (shared.go); a worker started
	// from it holds that session only. "": of a worker of its own.
	Namespace string
}

// DefaultCheckpointDelay is how long after a session call's result its
// checkpoint is taken at most (--checkpoint-delay).
const DefaultCheckpointDelay = 2 * time.Second

// checkpointLimit bounds the taking and storing of one checkpoint.
const checkpointLimit = 2 * time.Minute

// durability keeps the checkpoints of open sessions: it takes them off
// the calls' path, continues a session whose worker was lost from its
// last one, and forks sessions. It knows the sessions through the table
// it is given. Its fields are guarded by core.mu, and its methods ending
// in Locked need it held.
type durability struct {
	*core
	cp    Checkpointer // nil: checkpoints are off, and each method does nothing
	delay time.Duration
	place *placement
	table table
	// As Stats counts them.
	taken, failures, restores, forks int64
}

// table is what durability sees of the Manager's sessions. Its methods
// need core.mu held.
type table interface {
	// isOpenLocked says whether s is still open here.
	isOpenLocked(s *session) bool
	// openLocked yields the sessions open here.
	openLocked() iter.Seq[*session]
	// holdLocked takes the turn of s, which no call has, for work of the
	// Manager's own; yieldLocked gives it to the next call in line.
	holdLocked(s *session)
	yieldLocked(s *session)
}

func newDurability(c *core, o Options, place *placement, t table) *durability {
	return &durability{core: c, cp: o.Checkpoints, delay: positiveOr(o.CheckpointDelay, DefaultCheckpointDelay),
		place: place, table: t}
}

// statsLocked fills in s's figures of checkpoints. d.mu is held.
func (d *durability) statsLocked(s *Stats) {
	s.Checkpoints, s.CheckpointFailures, s.Restores, s.Forks = d.taken, d.failures, d.restores, d.forks
}

// restorableLocked says whether s has a checkpoint to continue from. d.mu
// is held.
func (d *durability) restorableLocked(s *session) bool {
	return d.cp != nil && s.ckptCalls > 0
}

// restorable is restorableLocked, taking d.mu.
func (d *durability) restorable(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.restorableLocked(s)
}

// scheduleLocked arranges a checkpoint of s once the delay has passed
// since its last call. d.mu is held.
func (d *durability) scheduleLocked(s *session) {
	if d.cp == nil || s.ckptTimer != nil || s.notDurable != "" {
		return
	}
	s.ckptTimer = time.AfterFunc(d.delay, func() {
		d.mu.Lock()
		s.ckptTimer = nil
		if d.closed || !d.table.isOpenLocked(s) {
			d.mu.Unlock()
			return
		}
		d.wg.Add(1)
		d.mu.Unlock()
		defer d.wg.Done()
		// Not d.closing: a checkpoint under way when pyrun starts to stop
		// must finish (Close waits for it), for a checkpoint called off
		// leaves its worker unusable, and the shutdown's checkpoint with it.
		d.checkpoint(context.Background(), s)
	})
}

// checkpoint takes a checkpoint of s, if its last calls are not covered yet,
// in its turn: calls that come meanwhile wait for it. On a shared session
// worker the checkpoint is the worker's, and it is also kept for the other
// sessions there whose last calls it covers and that have no call running
// or waiting (their turns are taken too): one checkpoint, not one each.
func (d *durability) checkpoint(ctx context.Context, s *session) {
	d.mu.Lock()
	if !d.table.isOpenLocked(s) || s.ckptCalls == s.calls || s.notDurable != "" {
		d.mu.Unlock()
		return
	}
	if s.held {
		// A call has the turn: it schedules again when it ends.
		d.mu.Unlock()
		return
	}
	group := []*session{s}
	for o := range d.table.openLocked() {
		if o != s && d.place.sameHost(o.w, s.w) && !o.held && o.ckptCalls < o.calls && o.notDurable == "" {
			group = append(group, o)
		}
	}
	info := make([]Saved, len(group))
	for i, g := range group {
		d.table.holdLocked(g)
		info[i] = Saved{ID: g.id, Owner: g.owner, AfterCall: g.calls, Started: g.started, LastUsed: g.lastUsed,
			Namespace: d.place.namespace(g.w)}
	}
	w := s.w
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, checkpointLimit)
	d.log.Debug("session checkpoint starts", "session_id", s.id, "after_call", info[0].AfterCall)
	began := time.Now()
	err := d.cp.Take(ctx, w, info)
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	for i, g := range group {
		d.table.yieldLocked(g)
		switch {
		case err == nil:
			g.ckptCalls = info[i].AfterCall
			d.taken++
			d.log.Debug("session checkpoint", "session_id", g.id, "after_call", info[i].AfterCall,
				"took", time.Since(began).Round(time.Millisecond))
		case errors.Is(err, supervisor.ErrNotDurable):
			// Said once; the session goes on as it would without checkpoints.
			g.notDurable = err.Error()
			d.failures++
			d.log.Info("session is not durable", "session_id", g.id, "why", err.Error())
		default:
			d.failures++
			d.log.Warn("session checkpoint failed", "session_id", g.id, "error", err.Error())
		}
	}
	d.kick()
}

// dropLocked removes an ended session's checkpoints in the background.
// d.mu is held.
func (d *durability) dropLocked(s *session) {
	if d.cp == nil {
		return
	}
	if s.ckptTimer != nil {
		s.ckptTimer.Stop()
		s.ckptTimer = nil
	}
	d.deleteInBackground(s.id)
}

// deleteInBackground removes session id's checkpoints, off the caller's
// path; Close waits for it.
func (d *durability) deleteInBackground(id string) {
	d.inBackground(func(ctx context.Context) { d.deleteSaved(ctx, id) })
}

// deleteSaved removes session id's checkpoints; a failure is logged, for
// the caller has no one to tell.
func (d *durability) deleteSaved(ctx context.Context, id string) {
	if err := d.cp.Delete(ctx, id); err != nil {
		d.log.Warn("could not delete a session's checkpoints", "session_id", id, "error", err.Error())
	}
}

// restore continues s, whose worker was lost, from its last checkpoint; it
// holds s's turn. It returns what the checkpoint holds, or why it could
// not.
func (d *durability) restore(ctx context.Context, s *session) (Saved, error) {
	// With shared workers, a session restored has a worker of its own (its
	// checkpoint is its host's whole memory): it counts in Limits.MaxHosts
	// and its client's Limits.ClientMaxHosts as any host, so that a client
	// whose worker held many sessions, lost, cannot make pyrun start a
	// worker per session, nor take every worker from the other clients.
	shared := d.place.shared()
	if shared {
		d.mu.Lock()
		if err := d.place.roomToRestoreLocked(s.id, s.owner); err != nil {
			d.mu.Unlock()
			return Saved{}, err
		}
		d.place.pendHostLocked(s.owner, 1)
		d.mu.Unlock()
	}
	w, saved, err := d.cp.Restore(ctx, s.id, d.kick)
	d.mu.Lock()
	if shared {
		d.place.pendHostLocked(s.owner, -1)
	}
	if err != nil {
		d.mu.Unlock()
		return Saved{}, err
	}
	old := s.w
	s.w = d.place.adoptLocked(s.owner, w, saved.Namespace)
	s.ckptCalls = saved.AfterCall
	if old == nil {
		s.calls = saved.AfterCall // moved here, or a previous run's
	}
	d.restores++
	if old != nil {
		d.closeWorker(old)
	}
	d.mu.Unlock()
	d.log.Info("session restored from its checkpoint", "session_id", s.id, "after_call", saved.AfterCall)
	return saved, nil
}

// ForkPrefix, before a session's id, asks for a new session that starts as
// a copy of that session's state ("fork:ID").
const ForkPrefix = "fork:"

// fork makes a worker for client whose state is a copy of session src's
// now, in src's turn, which the caller holds and fork passes on.
func (d *durability) fork(ctx context.Context, src *session, client string) (Worker, error) {
	id := src.id
	var err error
	w := src.w
	d.mu.Lock()
	if s := src; s.w != nil && s.w.Lost() != "" && s.ckptCalls > 0 {
		// Its worker is gone: the fork starts from its checkpoint.
		w = nil
	}
	d.mu.Unlock()
	var nw Worker
	ns := "" // the namespace the copy holds, on a shared worker
	if w != nil {
		nw, err = d.cp.Fork(ctx, w, d.kick)
		ns = d.place.namespace(w)
	} else {
		var saved Saved
		nw, saved, err = d.cp.Restore(ctx, id, d.kick)
		ns = saved.Namespace
	}
	d.mu.Lock()
	d.table.yieldLocked(src)
	d.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	d.mu.Lock()
	d.forks++
	nw = d.place.adoptLocked(client, nw, ns)
	d.mu.Unlock()
	return nw, nil
}

// final takes, at shutdown, a checkpoint of each open session whose last
// calls have none yet, so that a pyrun started with the same store
// continues them where they were.
func (d *durability) final(ctx context.Context) {
	if d.cp == nil {
		return
	}
	d.mu.Lock()
	var todo []*session
	for s := range d.table.openLocked() {
		if s.w != nil && s.ckptCalls < s.calls && s.notDurable == "" && !s.held {
			todo = append(todo, s)
		}
	}
	d.mu.Unlock()
	for _, s := range todo {
		d.checkpoint(ctx, s)
	}
}

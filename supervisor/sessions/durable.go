package sessions

// Durable sessions (docs/sessions.md): a checkpoint of a session's worker
// taken off the call's path, after its calls, and the session continued
// from it when its worker is lost.

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// scheduleCheckpointLocked arranges a checkpoint of s once Delay has passed
// since its last call. m.mu is held.
func (m *Manager) scheduleCheckpointLocked(s *session) {
	if m.opts.Checkpoints == nil || s.ckptTimer != nil || s.notDurable != "" {
		return
	}
	s.ckptTimer = time.AfterFunc(m.checkpointDelay(), func() {
		m.mu.Lock()
		s.ckptTimer = nil
		if m.closed || m.open[s.id] != s {
			m.mu.Unlock()
			return
		}
		m.wg.Add(1)
		m.mu.Unlock()
		defer m.wg.Done()
		// Not m.closing: a checkpoint under way when pyrun starts to stop
		// must finish (Close waits for it), for a checkpoint called off
		// leaves its worker unusable, and the shutdown's checkpoint with it.
		m.checkpoint(context.Background(), s)
	})
}

func (m *Manager) checkpointDelay() time.Duration {
	if m.opts.CheckpointDelay > 0 {
		return m.opts.CheckpointDelay
	}
	return DefaultCheckpointDelay
}

// checkpoint takes a checkpoint of s, if its last calls are not covered yet,
// in its turn: calls that come meanwhile wait for it. On a shared session
// worker the checkpoint is the worker's, and it is also kept for the other
// sessions there whose last calls it covers and that have no call running
// or waiting (their turns are taken too): one checkpoint, not one each.
func (m *Manager) checkpoint(ctx context.Context, s *session) {
	m.mu.Lock()
	if m.open[s.id] != s || s.ckptCalls == s.calls || s.notDurable != "" {
		m.mu.Unlock()
		return
	}
	if s.held {
		// A call has the turn: it schedules again when it ends.
		m.mu.Unlock()
		return
	}
	group := []*session{s}
	for _, o := range m.open {
		if o != s && m.place.sameHost(o.w, s.w) && !o.held && o.ckptCalls < o.calls && o.notDurable == "" {
			group = append(group, o)
		}
	}
	info := make([]Saved, len(group))
	for i, g := range group {
		g.busy++
		g.held = true
		m.running++
		info[i] = Saved{ID: g.id, Owner: g.owner, AfterCall: g.calls, Started: g.started, LastUsed: g.lastUsed,
			Namespace: m.place.namespace(g.w)}
	}
	w := s.w
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, checkpointLimit)
	m.log.Debug("session checkpoint starts", "session_id", s.id, "after_call", info[0].AfterCall)
	began := time.Now()
	err := m.opts.Checkpoints.Take(ctx, w, info)
	cancel()

	m.mu.Lock()
	defer m.mu.Unlock()
	for i, g := range group {
		m.doneLocked()
		g.busy--
		m.passLocked(g)
		switch {
		case err == nil:
			g.ckptCalls = info[i].AfterCall
			m.counts.Checkpoints++
			m.log.Debug("session checkpoint", "session_id", g.id, "after_call", info[i].AfterCall,
				"took", time.Since(began).Round(time.Millisecond))
		case errors.Is(err, supervisor.ErrNotDurable):
			// Said once; the session goes on as it would without checkpoints.
			g.notDurable = err.Error()
			m.counts.CheckpointFailures++
			m.log.Info("session is not durable", "session_id", g.id, "why", err.Error())
		default:
			m.counts.CheckpointFailures++
			m.log.Warn("session checkpoint failed", "session_id", g.id, "error", err.Error())
		}
	}
	m.kick()
}

// deleteCheckpoints removes an ended session's checkpoints in the
// background. m.mu is held.
func (m *Manager) deleteCheckpointsLocked(s *session) {
	if m.opts.Checkpoints == nil {
		return
	}
	if s.ckptTimer != nil {
		s.ckptTimer.Stop()
		s.ckptTimer = nil
	}
	m.deleteInBackground(s.id)
}

// deleteInBackground removes session id's checkpoints, off the caller's
// path; Close waits for it.
func (m *Manager) deleteInBackground(id string) {
	m.inBackground(func(ctx context.Context) { m.deleteSaved(ctx, id) })
}

// deleteSaved removes session id's checkpoints; a failure is logged, for
// the caller has no one to tell.
func (m *Manager) deleteSaved(ctx context.Context, id string) {
	if err := m.opts.Checkpoints.Delete(ctx, id); err != nil {
		m.log.Warn("could not delete a session's checkpoints", "session_id", id, "error", err.Error())
	}
}

// restore continues s, whose worker was lost, from its last checkpoint; it
// holds s's turn. It returns what the checkpoint holds, or why it could
// not.
func (m *Manager) restore(ctx context.Context, s *session) (Saved, error) {
	// With shared workers, a session restored has a worker of its own (its
	// checkpoint is its host's whole memory): it counts in Limits.MaxHosts
	// and its client's Limits.ClientMaxHosts as any host, so that a client
	// whose worker held many sessions, lost, cannot make pyrun start a
	// worker per session, nor take every worker from the other clients.
	shared := m.place.shared()
	if shared {
		m.mu.Lock()
		if err := m.place.roomToRestoreLocked(s.id, s.owner); err != nil {
			m.mu.Unlock()
			return Saved{}, err
		}
		m.place.pendHostLocked(s.owner, 1)
		m.mu.Unlock()
	}
	w, saved, err := m.opts.Checkpoints.Restore(ctx, s.id, m.kick)
	m.mu.Lock()
	if shared {
		m.place.pendHostLocked(s.owner, -1)
	}
	if err != nil {
		m.mu.Unlock()
		return Saved{}, err
	}
	old := s.w
	s.w = m.place.adoptLocked(s.owner, w, saved.Namespace)
	s.ckptCalls = saved.AfterCall
	if old == nil {
		s.calls = saved.AfterCall // moved here, or a previous run's
	}
	m.counts.Restores++
	if old != nil {
		m.closeWorker(old)
	}
	m.mu.Unlock()
	m.log.Info("session restored from its checkpoint", "session_id", s.id, "after_call", saved.AfterCall)
	return saved, nil
}

// ForkPrefix, before a session's id, asks for a new session that starts as
// a copy of that session's state ("fork:ID").
const ForkPrefix = "fork:"

// fork makes a worker whose state is a copy of session id's now, in that
// session's turn: for the same client only.
func (m *Manager) fork(ctx context.Context, id string, job supervisor.Job) (Worker, error) {
	if m.opts.Checkpoints == nil {
		return nil, m.errorf(ErrStart, ": forking a session needs checkpoints, which are off (session_store none)")
	}
	src, err := m.enter(ctx, id, job)
	if err != nil {
		return nil, err
	}
	w := src.w
	m.mu.Lock()
	if s := src; s.w != nil && s.w.Lost() != "" && s.ckptCalls > 0 {
		// Its worker is gone: the fork starts from its checkpoint.
		w = nil
	}
	m.mu.Unlock()
	var nw Worker
	ns := "" // the namespace the copy holds, on a shared worker
	if w != nil {
		nw, err = m.opts.Checkpoints.Fork(ctx, w, m.kick)
		ns = m.place.namespace(w)
	} else {
		var saved Saved
		nw, saved, err = m.opts.Checkpoints.Restore(ctx, id, m.kick)
		ns = saved.Namespace
	}
	m.mu.Lock()
	m.doneLocked()
	src.busy--
	m.passLocked(src)
	m.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	m.mu.Lock()
	m.counts.Forks++
	nw = m.place.adoptLocked(job.Client, nw, ns)
	m.mu.Unlock()
	return nw, nil
}

// adoptSaved learns the sessions of this instance a previous pyrun left in
// the store (restart continuity): they wait, without a worker, for a call
// within their lifetimes; the others' checkpoints are deleted.
func (m *Manager) adoptSaved() {
	if m.opts.Checkpoints == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpointLimit)
	defer cancel()
	saved, err := m.opts.Checkpoints.List(ctx)
	if err != nil {
		m.log.Warn("cannot list the sessions' checkpoints", "error", err.Error())
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, sv := range saved {
		if inst, _, _ := strings.Cut(sv.ID, "."); inst != m.opts.Instance && m.leaser() == nil {
			continue // another instance's, in a shared store
		}
		// With leases, every session in the store is watched for expiry
		// (sweepSaved), so that those of an instance that never comes back
		// go too; a call takes any of them over (lease.go).
		if m.pastLifetimeLocked(sv, now) {
			m.deleteSavedLocked(sv.ID)
			continue
		}
		m.dormant[sv.ID] = sv
	}
	if len(m.dormant) > 0 {
		m.log.Info("sessions of a previous run can continue", "sessions", len(m.dormant))
	}
}

// pastLifetimeLocked says whether a saved session has expired. m.mu is held.
func (m *Manager) pastLifetimeLocked(sv Saved, now time.Time) bool {
	return !now.Before(sv.LastUsed.Add(m.limits.Idle)) || !now.Before(sv.Started.Add(m.limits.MaxAge))
}

// deleteSavedLocked deletes a session's checkpoints in the background.
// m.mu is held.
func (m *Manager) deleteSavedLocked(id string) {
	delete(m.dormant, id)
	if l := m.leaser(); l != nil {
		m.sweepSavedLocked(l, id)
		return
	}
	m.deleteInBackground(id)
}

// wakeLocked makes a saved session of a previous run an open one, without
// a worker yet (runIn restores it), for its owner's call. m.mu is held.
func (m *Manager) wakeLocked(id, client string) *session {
	sv, ok := m.dormant[id]
	if !ok || !m.owns(sv.Owner, client) || m.closed {
		return nil
	}
	if m.pastLifetimeLocked(sv, time.Now()) {
		m.deleteSavedLocked(id)
		return nil
	}
	delete(m.dormant, id)
	s := &session{id: id, owner: sv.Owner, started: sv.Started, lastUsed: sv.LastUsed, calls: sv.AfterCall,
		ckptCalls: sv.AfterCall}
	m.open[id] = s
	m.log.Info("session continues from a previous run", "session_id", id, "after_call", sv.AfterCall)
	return s
}

// finalCheckpoints takes, at shutdown, a checkpoint of each open session
// whose last calls have none yet, so that a pyrun started with the same
// store continues them where they were.
func (m *Manager) finalCheckpoints(ctx context.Context) {
	if m.opts.Checkpoints == nil {
		return
	}
	m.mu.Lock()
	var todo []*session
	for _, s := range m.open {
		if s.w != nil && s.ckptCalls < s.calls && s.notDurable == "" && !s.held {
			todo = append(todo, s)
		}
	}
	m.mu.Unlock()
	for _, s := range todo {
		m.checkpoint(ctx, s)
	}
}

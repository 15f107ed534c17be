package sessions

// Durable sessions (docs/sessions.md): a checkpoint of a session's worker
// taken off the call's path, after its calls, and the session continued
// from it when its worker is lost.

import (
	"context"
	"errors"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Checkpointer takes, keeps and restores sessions' checkpoints
// (supervisor/checkpoint.Keeper is one).
type Checkpointer interface {
	// Take takes a checkpoint of w, the worker of the session s describes,
	// and keeps it. An error wrapping supervisor.ErrNotDurable: the session
	// cannot be checkpointed as it is (native code, too large).
	Take(ctx context.Context, w Worker, s Saved) error
	// Restore starts a worker from the latest intact checkpoint of session
	// id, and says what it holds.
	Restore(ctx context.Context, id string, exited func()) (Worker, Saved, error)
	// Delete removes the session's checkpoints.
	Delete(ctx context.Context, id string) error
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
		m.checkpoint(m.closing, s)
	})
}

func (m *Manager) checkpointDelay() time.Duration {
	if m.opts.CheckpointDelay > 0 {
		return m.opts.CheckpointDelay
	}
	return DefaultCheckpointDelay
}

// checkpoint takes a checkpoint of s, if its last calls are not covered yet,
// in its turn: calls that come meanwhile wait for it.
func (m *Manager) checkpoint(ctx context.Context, s *session) {
	m.mu.Lock()
	if m.open[s.id] != s || s.ckptCalls == s.calls || s.notDurable != "" {
		m.mu.Unlock()
		return
	}
	s.busy++
	if s.held {
		// A call has the turn: it schedules again when it ends.
		s.busy--
		m.mu.Unlock()
		return
	}
	s.held = true
	m.running++
	info := Saved{ID: s.id, Owner: s.owner, AfterCall: s.calls, Started: s.started, LastUsed: s.lastUsed}
	w := s.w
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, checkpointLimit)
	began := time.Now()
	err := m.opts.Checkpoints.Take(ctx, w, info)
	cancel()

	m.mu.Lock()
	defer m.mu.Unlock()
	m.doneLocked()
	s.busy--
	m.passLocked(s)
	switch {
	case err == nil:
		s.ckptCalls = info.AfterCall
		m.counts.Checkpoints++
		m.log.Debug("python session checkpoint", "python_session", s.id, "after_call", info.AfterCall,
			"took", time.Since(began).Round(time.Millisecond))
	case errors.Is(err, supervisor.ErrNotDurable):
		// Said once; the session goes on as it would without checkpoints.
		s.notDurable = err.Error()
		m.counts.CheckpointFailures++
		m.log.Info("python session is not durable", "python_session", s.id, "why", err.Error())
	default:
		m.counts.CheckpointFailures++
		m.log.Warn("python session checkpoint failed", "python_session", s.id, "error", err.Error())
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
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), checkpointLimit)
		defer cancel()
		if err := m.opts.Checkpoints.Delete(ctx, s.id); err != nil {
			m.log.Warn("could not delete a python session's checkpoints", "python_session", s.id, "error", err.Error())
		}
	}()
}

// restore continues s, whose worker was lost, from its last checkpoint; it
// holds s's turn. It returns what the checkpoint holds, or why it could
// not.
func (m *Manager) restore(ctx context.Context, s *session) (Saved, error) {
	w, saved, err := m.opts.Checkpoints.Restore(ctx, s.id, m.kick)
	if err != nil {
		return Saved{}, err
	}
	m.mu.Lock()
	old := s.w
	s.w = w
	s.ckptCalls = saved.AfterCall
	m.counts.Restores++
	m.closeWorker(old)
	m.mu.Unlock()
	m.log.Info("python session restored from its checkpoint", "python_session", s.id, "after_call", saved.AfterCall)
	return saved, nil
}

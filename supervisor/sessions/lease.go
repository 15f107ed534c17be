package sessions

// Several instances with one store (docs/sessions.md, "Several
// instances"): a session is served by at most one pyrun at a time, the one
// that holds its lease in the store. A call that reaches an instance that
// does not serve the session moves it there: the instance takes the free
// lease, or asks the holder to hand the session over (the holder finishes
// the running call, takes a checkpoint and releases the lease), and then
// continues the session from its latest checkpoint. A call is never
// answered from a stale copy: an instance serves only what it holds the
// lease of, and a checkpoint is written only by the lease's holder.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Leaser holds sessions' leases in a shared store (Options.Leases;
// checkpoint.Keeper is one): a Manager holds the lease of each session it
// serves.
type Leaser interface {
	// Hold takes session id's lease for this instance (it may hold it
	// already), for the session's owner ("": not known yet). An error
	// wrapping ErrHeld: another instance holds it; when it can tell for
	// whom, the error is a HeldFor too.
	Hold(ctx context.Context, id, owner string) error
	// AskMove asks the instance that holds id's lease to hand it over.
	AskMove(ctx context.Context, id string) error
	// Renew renews the leases held; it returns the sessions another
	// instance asked for, and those whose lease was lost.
	Renew(ctx context.Context) (moves, lost []string)
	// Release gives id's lease up.
	Release(ctx context.Context, id string) error
	// Describe says what session id's latest checkpoint holds; an error
	// wrapping ErrNoCheckpoint when it has none, ErrDamaged when none of
	// its records passes its checks.
	Describe(ctx context.Context, id string) (Saved, error)
	// RenewEvery is how often Renew must run for the leases to last.
	RenewEvery() time.Duration
}

var (
	// ErrHeld: another pyrun instance serves the session (holds its
	// lease), and did not hand it over in time.
	ErrHeld = condition("another pyrun instance serves the %ssession")
	// ErrNoCheckpoint: the store has no checkpoint of the session.
	ErrNoCheckpoint = errors.New("the session has no checkpoint")
	// ErrDamaged: the store has records of the session, and none of them
	// passes its checks.
	ErrDamaged = errors.New("the session's checkpoint is damaged")
)

// DefaultMoveWait is how long a call waits at most for another instance to
// hand its session over (--session-move-wait).
const DefaultMoveWait = 30 * time.Second

// movePoll is how often a call waiting for a hand-over tries the lease.
const movePoll = 100 * time.Millisecond

// leases holds the store's leases of the sessions served here: it takes
// them, gives them up, and waits for another instance to hand one over.
// What a lease's coming and going does to the sessions is the Manager's
// (adopt, handOver, renewLeases). A nil *leases, when the Checkpointer is
// no Options.Leases, holds none. Its counts are guarded by core.mu.
type leases struct {
	*core
	l        Leaser
	moveWait time.Duration // Options.MoveWait, or DefaultMoveWait
	// As Stats counts them.
	movesIn, movesOut, moveTimeouts int64
}

// newLeases holds leases with o.Leases, or is nil when there are none.
func newLeases(c *core, o Options) *leases {
	if o.Leases == nil {
		return nil
	}
	return &leases{core: c, l: o.Leases, moveWait: positiveOr(o.MoveWait, DefaultMoveWait)}
}

// statsLocked fills in s's figures of moves. ls.mu is held.
func (ls *leases) statsLocked(s *Stats) {
	if ls != nil {
		s.MovesIn, s.MovesOut, s.MoveTimeouts = ls.movesIn, ls.movesOut, ls.moveTimeouts
	}
}

// holdNew takes the lease of a session just started here. A store that
// fails is logged: the session runs, and its checkpoints fail until the
// lease is held.
func (ls *leases) holdNew(ctx context.Context, s *session) {
	if ls == nil {
		return
	}
	if err := ls.l.Hold(ctx, s.id, s.owner); err != nil {
		ls.log.Warn("cannot take a new session's lease; it is not durable until its checkpoint", "session_id", s.id, "error", err.Error())
	}
}

// adopt takes session id over from the store for client's call (takeOver),
// holding its turn; calls for it meanwhile wait in line. m.mu is held, and
// adopt unlocks it.
func (m *Manager) adopt(ctx context.Context, id, client string) (*session, error) {
	delete(m.dormant, id) // a previous run's session: the store says more
	s := &session{id: id, adopting: true, busy: 1, held: true}
	m.open[id] = s
	m.running++
	m.mu.Unlock()
	err := m.takeOver(ctx, s, client)
	if err == nil {
		return s, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[id] == s {
		delete(m.open, id)
	}
	s.moved = true // calls in line try for themselves
	m.yieldLocked(s)
	return nil, err
}

// roomLocked refuses a session moved here for client when it would pass
// the sessions' bounds (the placeholders of sessions being moved here
// count too). m.mu is held.
func (m *Manager) roomLocked(client string) error {
	total, mine := m.countLocked(client)
	total-- // without this placeholder (owner "")
	switch {
	case total >= m.limits.Max:
		return m.errorf(ErrTooMany, ": %d are open on this instance, the most it allows (max_sessions), so the session cannot move here; retry, or end a session", total)
	case client != m.opts.Anonymous && mine >= m.limits.ClientMax:
		return m.errorf(ErrTooMany, ": this client has %d open on this instance, the most one client may have (client_max_sessions), so the session cannot move here", mine)
	}
	return nil
}

// sweepSavedLocked deletes, in the background, the checkpoints of a
// session no instance serves that is past its lifetimes as its latest
// checkpoint says, read with its lease held: what this instance saw of it
// before may be stale (it moved, and was used, since). m.mu is held.
func (m *Manager) sweepSavedLocked(id string) {
	if m.open[id] != nil {
		return
	}
	l := m.leases.l
	m.inBackground(func(ctx context.Context) {
		if err := l.Hold(ctx, id, ""); err != nil {
			// Another instance holds its lease: a live one serves it and
			// ends it in its time, but a gone one's lease (not released:
			// killed, or its release lost) only runs out. Look again then,
			// or the session of an instance that never comes back stays
			// in the store for good.
			select {
			case <-m.stop:
			case <-time.After(l.RenewEvery()):
				m.mu.Lock()
				select {
				case <-m.stop: // closed meanwhile
				default:
					m.sweepSavedLocked(id)
				}
				m.mu.Unlock()
			}
			return
		}
		sv, err := l.Describe(ctx, id)
		m.mu.Lock()
		if m.open[id] != nil {
			m.mu.Unlock()
			return // a call took it over meanwhile: its lease now
		}
		expired := errors.Is(err, ErrNoCheckpoint) || err == nil && m.pastLifetimeLocked(sv, time.Now())
		if err == nil && !expired {
			m.dormant[id] = sv // used since: looked at again in its time
		}
		m.mu.Unlock()
		if !expired {
			_ = l.Release(ctx, id)
			return
		}
		m.durable.deleteSaved(ctx, id)
	})
}

// validID says whether id has the shape of a session id: an instance
// name, a dot, 32 hex digits.
func validID(id string) bool {
	inst, rest, ok := strings.Cut(id, ".")
	return ok && ValidInstance(inst) == nil && len(rest) == 32 && isHex(rest)
}

// await takes session id's lease for client's call, asking the instance
// that holds it to hand the session over, and waiting for that up to
// moveWait.
func (ls *leases) await(ctx context.Context, id, client string) error {
	wait := ls.moveWait
	deadline := time.Now().Add(wait)
	asked := false
	for {
		err := ls.l.Hold(ctx, id, "")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrHeld) {
			return ls.errorf(ErrUnknown, ": session %q could not be taken over from the store: %v", id, err)
		}
		if !asked && ls.notOwnerOf(ctx, id, client, err) {
			// Asked for, the holder would hand it over (a checkpoint, its
			// live worker closed) for a call that is then refused.
			return ls.errorf(ErrUnknown, ": no %s session %q is open here", ls.lang, clip(id, 80))
		}
		if !asked {
			if aerr := ls.l.AskMove(ctx, id); aerr != nil {
				return ls.errorf(ErrUnknown, ": session %q: %v", id, aerr)
			}
			asked = true
			ls.log.Info("session is served by another instance; asked it to hand the session over", "session_id", id, "holder", err.Error())
		}
		if time.Now().After(deadline) {
			ls.mu.Lock()
			ls.moveTimeouts++
			ls.mu.Unlock()
			return ls.errorf(ErrHeld, ": %v, and did not hand it over within %s (session_move_wait): it is busy, or cannot move (not durable); retry later, or send the call to the instance that serves it", err, wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for another pyrun instance to hand the %s session over: %w", ls.lang, ctx.Err())
		case <-time.After(movePoll):
		}
	}
	return nil
}

// takeOver makes the session id, which this instance does not serve, an
// open session here: s is its placeholder in m.open, whose turn the caller
// holds. It takes the lease (await), and fills s from the session's latest
// checkpoint; runIn then starts its worker from it.
func (m *Manager) takeOver(ctx context.Context, s *session, client string) error {
	if err := m.leases.await(ctx, s.id, client); err != nil {
		return err
	}
	l := m.leases.l
	saved, err := l.Describe(ctx, s.id)
	release := func() {
		if rerr := l.Release(context.WithoutCancel(ctx), s.id); rerr != nil {
			m.log.Warn("could not release a session's lease", "session_id", s.id, "error", rerr.Error())
		}
	}
	if errors.Is(err, ErrNoCheckpoint) {
		// No session of that id: its lease goes with it, so that ids
		// tried in vain leave nothing in the store.
		if derr := m.durable.cp.Delete(context.WithoutCancel(ctx), s.id); derr != nil {
			m.log.Debug("could not drop the lease of an unknown session", "session_id", s.id, "error", derr.Error())
		}
	} else if err != nil {
		release()
	}
	if errors.Is(err, ErrDamaged) {
		// Its records stay in the store, for whoever looks into why (a
		// record that fails its checks may be one a wrong key, or a disk,
		// spoilt); the session cannot go on from them.
		m.log.Warn("python session's checkpoint is damaged; its state is lost", "python_session", s.id,
			"client", client, "error", err.Error())
		return m.errorf(ErrLost, ": session %q could not be restored from the session store: %v, so its state is lost", s.id, err)
	}
	if err != nil {
		if inst, _, _ := strings.Cut(s.id, "."); errors.Is(err, ErrNoCheckpoint) && inst != m.opts.Instance {
			if ierr := m.checkInstance(s.id); ierr != nil {
				return ierr
			}
		}
		if errors.Is(err, ErrNoCheckpoint) {
			return m.errorf(ErrUnknown, ": no %s session %q is open here", m.lang, clip(s.id, 80))
		}
		return m.errorf(ErrUnknown, ": session %q could not be read from the store: %v", s.id, err)
	}
	if !owns(saved.Owner, client) {
		release()
		m.log.Warn("refused a call to another client's session", "session_id", s.id, "client", client, "owner", saved.Owner)
		return m.errorf(ErrUnknown, ": no %s session %q is open here", m.lang, clip(s.id, 80))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.roomLocked(client); err != nil {
		m.leases.releaseLocked(s.id)
		return err
	}
	if m.pastLifetimeLocked(saved, time.Now()) {
		// Its checkpoints go (and the lease held with them), as its own
		// instance would have deleted them.
		delete(m.dormant, s.id)
		m.durable.deleteInBackground(s.id)
		return m.errorf(ErrExpired, ": session %q passed its lifetime (session_idle, session_max_age)", s.id)
	}
	s.owner, s.started, s.lastUsed = saved.Owner, saved.Started, saved.LastUsed
	s.calls, s.ckptCalls = saved.AfterCall, saved.AfterCall
	s.adopting = false
	m.leases.movesIn++
	m.log.Info("session moved here", "session_id", s.id, "after_call", saved.AfterCall, "client", client)
	return nil
}

// HeldFor is an error of ErrHeld that knows for which client the
// instance that holds the lease serves the session (checkpoint.HeldError).
type HeldFor interface {
	ServesFor(client string) (yes, known bool)
}

// notOwnerOf says whether the store tells that session id, which another
// instance serves (held, Hold's error), is not client's: from the owner
// its lease was taken for, else from its latest record. Neither known (a
// lease of an older pyrun, a session without an intact record yet), it is
// not refused here: the owner is checked once the session has moved.
func (ls *leases) notOwnerOf(ctx context.Context, id, client string, held error) bool {
	owner := "(the one its lease was taken for)"
	yes, known := false, false
	var hf HeldFor
	if errors.As(held, &hf) {
		yes, known = hf.ServesFor(client)
	}
	if !known {
		saved, err := ls.l.Describe(ctx, id)
		if err != nil {
			return false
		}
		owner, yes = saved.Owner, owns(saved.Owner, client)
	}
	if !yes {
		ls.log.Warn("refused a call to another client's session, which another instance serves", "python_session", id,
			"client", client, "owner", owner)
	}
	return !yes
}

// renewLeases renews the leases of the sessions served here until stop is
// closed, hands over those another instance asks for, and stops serving
// those whose lease was lost.
func (m *Manager) renewLeases(stop <-chan struct{}) {
	l := m.leases.l
	defer m.wg.Done()
	t := time.NewTicker(l.RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.RenewEvery())
		moves, lost := l.Renew(ctx)
		cancel()
		m.mu.Lock()
		for _, id := range lost {
			if s := m.open[id]; s != nil && !s.adopting {
				m.log.Warn("session's lease was lost; another instance may serve it now", "session_id", id)
				s.leaseLost = true
				if !s.held {
					m.movedAwayLocked(s)
				}
			}
		}
		for _, id := range moves {
			if s := m.open[id]; s != nil && !s.adopting && !m.closed {
				m.handOverLocked(s)
			}
		}
		m.mu.Unlock()
	}
}

// handOverLocked hands s over to the instance that asked for it, once its
// running call, if any, has ended: a checkpoint of its last calls, then its
// lease released. m.mu is held.
func (m *Manager) handOverLocked(s *session) {
	if s.notDurable != "" {
		return // it cannot move; the asker's wait runs out and says so
	}
	if s.held {
		s.moveWanted = true // runIn hands it over when its call ends
		return
	}
	m.holdLocked(s)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.handOver(s)
	}()
}

// handOver checkpoints s, whose turn it holds, releases its lease and
// forgets it: a later call here takes it over again.
func (m *Manager) handOver(s *session) {
	m.mu.Lock()
	s.moveWanted = false
	need := s.ckptCalls < s.calls && s.w != nil
	// Namespace: its worker's checkpoint, marked with it.
	info := Saved{ID: s.id, Owner: s.owner, AfterCall: s.calls, Started: s.started, LastUsed: s.lastUsed,
		Namespace: m.place.namespace(s.w)}
	w := s.w
	m.mu.Unlock()
	var err error
	if need {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointLimit) // as durable.go's
		err = m.durable.cp.Take(ctx, w, []Saved{info})
		cancel()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doneLocked()
	s.busy--
	if err != nil {
		m.durable.failures++
		m.log.Warn("session could not be handed over: its checkpoint failed", "session_id", s.id, "error", err.Error())
		if errors.Is(err, supervisor.ErrNotDurable) {
			s.notDurable = err.Error()
		}
		m.passLocked(s)
		return
	}
	if need {
		s.ckptCalls = info.AfterCall
		m.durable.taken++
	}
	m.leases.movesOut++
	m.log.Info("session handed over to another instance", "session_id", s.id, "after_call", s.calls)
	m.movedAwayLocked(s)
	m.passLocked(s) // calls waiting here take it over again (enter)
}

// movedAwayLocked stops serving s here, keeping its checkpoints, and
// releases its lease: another instance serves it now. m.mu is held.
func (m *Manager) movedAwayLocked(s *session) {
	if m.open[s.id] != s {
		return
	}
	delete(m.open, s.id)
	s.moved = true
	if s.ckptTimer != nil {
		s.ckptTimer.Stop()
		s.ckptTimer = nil
	}
	m.leases.releaseLocked(s.id)
	m.closeWorker(s.w)
	s.w = nil
}

// releaseLocked gives up a session's lease in the background. ls.mu is
// held.
func (ls *leases) releaseLocked(id string) {
	if ls == nil {
		return
	}
	ls.inBackground(func(ctx context.Context) {
		if err := ls.l.Release(ctx, id); err != nil {
			ls.log.Debug("session's lease was not released", "session_id", id, "error", err.Error())
		}
	})
}

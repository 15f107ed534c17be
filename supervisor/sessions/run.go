package sessions

// The path of a call: a session found or started, its code run on its
// worker, and what became of the worker.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Run runs a call in a session, starting the session first for
// NewSession. The result carries the session's id (Result.SessionID). A
// Python error, timeout or crash is a Result, as with the pool; a call
// that did not run gets an error wrapping one of the ErrXxx above. A call
// whose worker was lost returns its Result, which says so, and the session
// has ended.
func (m *Manager) Run(ctx context.Context, c Call, ev supervisor.Events) (supervisor.Result, error) {
	var s *session
	var err error
	if id, ok := strings.CutPrefix(c.Session, ForkPrefix); ok {
		s, err = m.start(ctx, c.Job.Client, func(ctx context.Context) (Worker, error) {
			if m.durable.cp == nil {
				return nil, m.errorf(ErrStart, ": forking a session needs checkpoints, which are off (session_store none)")
			}
			src, err := m.enter(ctx, id, c.Job) // for the same client only
			if err != nil {
				return nil, err
			}
			return m.durable.fork(ctx, src, c.Job.Client)
		})
	} else if c.Session == NewSession {
		s, err = m.start(ctx, c.Job.Client, nil)
	} else {
		s, err = m.enter(ctx, c.Session, c.Job)
	}
	if err == nil && (c.Session == NewSession || strings.HasPrefix(c.Session, ForkPrefix)) {
		m.leases.holdNew(ctx, s)
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
		w = m.place.placeLocked(client)
	}
	// A new host, or a fork's worker (a host of its own: adoptLocked).
	newHost := w == nil && m.place.shared()
	if newHost {
		if err := m.place.roomForHostLocked(client); err != nil {
			m.starting[client]--
			if m.starting[client] == 0 {
				delete(m.starting, client)
			}
			m.doneLocked()
			m.mu.Unlock()
			return nil, err
		}
		m.place.pendHostLocked(client, 1)
	}
	var err error
	var spare Worker
	if w == nil {
		if with == nil {
			spare, err = m.place.awaitSpareLocked(ctx)
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
			m.place.pendHostLocked(client, -1)
			if with == nil && err == nil && !m.closed {
				w = m.place.hostLocked(client, w)
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

// runIn runs c in s, whose turn the caller holds, and passes the turn on.
func (m *Manager) runIn(ctx context.Context, s *session, c Call, ev supervisor.Events) (supervisor.Result, error) {
	job := c.Job
	// A session keeps its /output/ (docs/contract.md section 9).
	job.InSession = supervisor.SessionCall{ID: s.id, KeepOutput: true, Last: c.End}
	var res supervisor.Result
	var err error
	var rolled *Saved // the checkpoint the session went back to
	ran := job.Code != "" || !c.End
	// A worker lost while the session was idle: its checkpoint continues it
	// (not for a call that only ends the session).
	if ran && m.durable.restorable(s) {
		if s.w == nil {
			// A session of a previous run: its first call here restores it.
			saved, rerr := m.durable.restore(context.WithoutCancel(ctx), s)
			if errors.Is(rerr, ErrNoRoom) {
				return m.refuseRestore(s, rerr)
			}
			if rerr != nil {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.yieldLocked(s)
				e := m.errorf(ErrLost, ": session %q could not be restored from its checkpoint: %v", s.id, rerr)
				m.endLocked(s, EndLost, e)
				return supervisor.Result{SessionID: s.id}, e
			}
			_ = saved // its state is the latest: nothing was rolled back
		} else if why := s.w.Lost(); why != "" && lostReason(why) == EndLost {
			saved, rerr := m.durable.restore(context.WithoutCancel(ctx), s)
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
	if lost != "" && lostReason(lost) == EndLost && m.durable.restorable(s) {
		if saved, rerr := m.durable.restore(context.WithoutCancel(ctx), s); errors.Is(rerr, ErrNoRoom) {
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
			m.durable.scheduleLocked(s)
		}
	}
	return res, err
}

// refuseRestore ends s's call, whose turn it holds, with err (ErrNoRoom):
// the session stays as it is, its checkpoint kept, for a later call.
func (m *Manager) refuseRestore(s *session, err error) (supervisor.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.yieldLocked(s)
	m.kick()
	return supervisor.Result{SessionID: s.id}, err
}

// ageErr is the error of a session past Limits.MaxAge.
func (m *Manager) ageErr(s *session) error {
	return m.errorf(ErrExpired, ": session %q reached its maximum age of %s (session_max_age)", s.id, m.limits.MaxAge)
}

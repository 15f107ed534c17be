package sessions

// How sessions end: on their own (expiry), when pyrun stops, and what
// ending one does.

import (
	"context"
	"fmt"
	"time"
)

// expire ends sessions idle or old past their limits. A session with a
// call running or waiting is never idle; one past its age ends when its
// running call does.
func (m *Manager) expire() {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		now := time.Now()
		next := time.Duration(-1)
		for _, s := range m.open {
			if s.busy > 0 {
				continue
			}
			// No call runs, so Lost does not wait.
			if s.w == nil {
				// A session of a previous run, restored at its next call.
			} else if why := s.w.Lost(); why != "" && !(lostReason(why) == EndLost && m.durable.restorableLocked(s)) {
				// (With a checkpoint, its next call continues from it.)
				m.endLocked(s, lostReason(why), m.errorf(ErrLost, ": session %q ended because its worker was lost while idle (%s), and its state with it", s.id, why))
				continue
			}
			idleAt := s.lastUsed.Add(m.limits.Idle)
			ageAt := s.started.Add(m.limits.MaxAge)
			switch {
			case !now.Before(ageAt):
				m.endLocked(s, EndMaxAge, m.ageErr(s))
				continue
			case !now.Before(idleAt):
				m.endLocked(s, EndIdle, m.errorf(ErrExpired, ": session %q had no call for %s (session_idle)", s.id, m.limits.Idle))
				continue
			}
			if d := min(idleAt.Sub(now), ageAt.Sub(now)); next < 0 || d < next {
				next = d
			}
		}
		for id, sv := range m.dormant {
			if m.pastLifetimeLocked(sv, now) {
				m.deleteSavedLocked(id)
				continue
			}
			// Looked at again when it would expire.
			d := min(sv.LastUsed.Add(m.limits.Idle).Sub(now), sv.Started.Add(m.limits.MaxAge).Sub(now))
			if next < 0 || d < next {
				next = d
			}
		}
		if d := m.place.expireLocked(now); d >= 0 && (next < 0 || d < next) {
			next = d
		}
		m.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if next >= 0 {
			t = time.NewTimer(next + time.Millisecond)
			timer = t.C
		}
		select {
		case <-m.stop:
		case <-m.wake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-m.stop:
			return
		default:
		}
	}
}

// Close refuses new calls and sessions, lets running calls finish until
// ctx is done (then kills their workers), ends every session and returns
// once their workers have stopped.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	m.cancelClosing() // spares being started stop starting
	var idle chan struct{}
	if m.running > 0 {
		idle = make(chan struct{})
		m.idleSignal = idle
	}
	m.mu.Unlock()
	close(m.stop)

	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = fmt.Errorf("close %s sessions: calls still running: %w", m.lang, ctx.Err())
			m.mu.Lock()
			for _, s := range m.open {
				if s.held && s.w != nil {
					s.w.Kill("pyrun is shutting down")
				}
			}
			m.mu.Unlock()
			<-idle
		}
	}
	m.durable.final(ctx)
	m.mu.Lock()
	for _, s := range m.open {
		m.endLocked(s, EndShutdown, m.errorf(ErrClosed, ""))
	}
	m.place.closeLocked()
	if m.leaseStop != nil {
		close(m.leaseStop) // the final checkpoints are written: leases go
	}
	m.mu.Unlock()
	m.wg.Wait()
	return err
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
		m.durable.dropLocked(s)
	} else {
		m.leases.releaseLocked(s.id)
	}
	m.log.Info("session ended", "session_id", s.id, "reason", reason, "client", s.owner,
		"calls", s.calls, "age", time.Since(s.started).Round(time.Millisecond), "open", len(m.open))
	m.closeWorker(s.w)
}

package sessions

// Dormant sessions: sessions in the store that no worker here holds, a
// previous run's or (with leases) another instance's, known to the
// Manager's table until a call wakes them or they expire.

import (
	"context"
	"strings"
	"time"
)

// adoptSaved learns the sessions of this instance a previous pyrun left in
// the store (restart continuity): they wait, without a worker, for a call
// within their lifetimes; the others' checkpoints are deleted.
func (m *Manager) adoptSaved() {
	if m.durable.cp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpointLimit)
	defer cancel()
	saved, err := m.durable.cp.List(ctx)
	if err != nil {
		m.log.Warn("cannot list the sessions' checkpoints", "error", err.Error())
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, sv := range saved {
		if inst, _, _ := strings.Cut(sv.ID, "."); inst != m.opts.Instance && m.leases == nil {
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
	if m.leases != nil {
		m.sweepSavedLocked(id)
		return
	}
	m.durable.deleteInBackground(id)
}

// wakeLocked makes a saved session of a previous run an open one, without
// a worker yet (runIn restores it), for its owner's call. m.mu is held.
func (m *Manager) wakeLocked(id, client string) *session {
	sv, ok := m.dormant[id]
	if !ok || !owns(sv.Owner, client) || m.closed {
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

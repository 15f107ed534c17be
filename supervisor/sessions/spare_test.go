package sessions_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// waitStats polls m's stats until ok says yes, for at most within.
func waitStats(t *testing.T, m *sessions.Manager, within time.Duration, what string, ok func(sessions.Stats) bool) sessions.Stats {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := m.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (stats %+v)", what, within, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After a session starts, a worker waits for the next "new", which takes
// it (a fresh worker: nothing of the first session's state), and another
// is started ahead in its place.
func TestSpareServesTheNextSession(t *testing.T) {
	m, _ := manager(t, sessions.Limits{})
	a := call(t, m, sessions.NewSession, "x = 'first session'")
	if st := m.Stats(); st.Spares+st.SparesStarting != 1 || st.SpareHits != 0 {
		t.Fatalf("after the first session: %d spares, %d starting, %d hits; want one spare coming, no hit", st.Spares, st.SparesStarting, st.SpareHits)
	}
	waitStats(t, m, 2*time.Minute, "a spare ready", func(st sessions.Stats) bool { return st.Spares == 1 })

	b := call(t, m, sessions.NewSession, "y = 41")
	if st := m.Stats(); st.SpareHits != 1 {
		t.Errorf("the second session: %d spare hits, want 1", st.SpareHits)
	}
	if r := call(t, m, b.SessionID, "'x' in globals(), y + 1"); strings.Join(strings.Fields(r.Value), "") != "[false,42]" {
		t.Errorf("the session on the spare: value %v, want [false, 42] (its own state, none of the first's)", r.Value)
	}
	if r := call(t, m, a.SessionID, "x"); r.Value != `"first session"` {
		t.Errorf("the first session after the second took the spare: value %v", r.Value)
	}
	waitStats(t, m, 2*time.Minute, "a new spare in its place", func(st sessions.Stats) bool { return st.Spares == 1 })
}

// Spares -1: no worker is started ahead.
func TestNoSpares(t *testing.T) {
	m, _ := manager(t, sessions.Limits{Spares: -1})
	call(t, m, sessions.NewSession, "1")
	if st := m.Stats(); st.Spares != 0 || st.SparesStarting != 0 {
		t.Errorf("with Spares -1: %d spares, %d starting; want none", st.Spares, st.SparesStarting)
	}
}

// A spare that waits Idle unused is dropped, and none is started while
// max_sessions leaves no room for another session.
func TestSpareIsDroppedWhenUnusedAndWithoutRoom(t *testing.T) {
	m, _ := manager(t, sessions.Limits{Idle: 3 * time.Second, Max: 2})
	call(t, m, sessions.NewSession, "1")
	waitStats(t, m, 2*time.Minute, "a spare ready", func(st sessions.Stats) bool { return st.Spares == 1 })
	waitStats(t, m, 30*time.Second, "the unused spare dropped after Idle", func(st sessions.Stats) bool {
		return st.Spares == 0 && st.SparesStarting == 0
	})

	m2, _ := manager(t, sessions.Limits{Max: 1})
	call(t, m2, sessions.NewSession, "1")
	if st := m2.Stats(); st.Spares != 0 || st.SparesStarting != 0 {
		t.Errorf("max_sessions 1, one open: %d spares, %d starting; want none (no room for another session)", st.Spares, st.SparesStarting)
	}
}

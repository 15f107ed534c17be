package sessions_test

import (
	"testing"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// R sessions as namespaces on one shared webR worker (docs/sessions.md,
// Shared session workers): two sessions of one client keep their own
// variables, working-directory files and random streams; a third is placed
// on the same worker without a worker start; an ended one is dropped.
func TestSharedRSessionsKeepTheirOwnState(t *testing.T) {
	m, _ := engineManagerOn(t, supervisor.R, sessions.Limits{Spares: -1, Max: 4, ClientMax: 4}, 8)
	a := callAs(t, m, "alice", sessions.NewSession, "x <- 'a'; writeLines('a', 'f.txt'); set.seed(1); ref <- runif(3); set.seed(1); first <- runif(1)")
	started := m.Stats()
	b := callAs(t, m, "alice", sessions.NewSession, "c(exists('x'), file.exists('f.txt'))")
	if b.Worker != a.Worker {
		t.Errorf("two sessions of one client ran on %s and %s, want one worker", a.Worker, b.Worker)
	}
	if b.Value != "[false, false]" && compact(b.Value) != "[false,false]" {
		t.Errorf("the second session sees %s, want none of the first's state", b.Value)
	}
	// b's draws, and its own set.seed, leave a's stream where a left it.
	callAs(t, m, "alice", b.SessionID, "x <- 'b'; writeLines('b', 'f.txt'); set.seed(99); runif(5)")
	got := callAs(t, m, "alice", a.SessionID, "c(x, readLines('f.txt'), identical(runif(2), ref[2:3]))")
	if v := compact(got.Value); v != `["a","a","TRUE"]` {
		t.Errorf("the first session, back: %s, want its variable, file and random stream", v)
	}
	c := callAs(t, m, "alice", sessions.NewSession, "exists('x')")
	if st := m.Stats(); c.Worker != a.Worker || st.Hosts != 1 || st.Placed != 2 || st.HostStarts != started.HostStarts {
		t.Errorf("the third session on %s (first's %s): %d hosts, %d placed, %d host starts (before: %d); want it placed on the first's worker",
			c.Worker, a.Worker, st.Hosts, st.Placed, st.HostStarts, started.HostStarts)
	}
	if _, err := m.Run(t.Context(), sessions.Call{Session: a.SessionID, End: true, Job: supervisor.Job{ID: "end", Client: "alice"}}, nil); err != nil {
		t.Fatal(err)
	}
	// A later call on the worker drops the ended session's namespace (the
	// session's worker is closed in the background): its stored files go
	// (b's own are in place, c's are stored).
	callAs(t, m, "alice", b.SessionID, "1")
	kept := callAs(t, m, "alice", b.SessionID, "c(x, readLines('f.txt'), list.files('/sessions'))")
	if v := compact(kept.Value); v != `["b","b","s3"]` {
		t.Errorf("after the first session ended, the second sees %s, want its own state and only the third's namespace stored", v)
	}
}

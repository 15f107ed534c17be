package sessions_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// takes records the checkpoints a real Keeper takes: how many sessions
// each was kept for.
type takes struct {
	*checkpoint.Keeper
	mu  sync.Mutex
	got []int
}

func (k *takes) Take(ctx context.Context, w sessions.Worker, saved []sessions.Saved) error {
	k.mu.Lock()
	k.got = append(k.got, len(saved))
	k.mu.Unlock()
	return k.Keeper.Take(ctx, w, saved)
}

// durableOn is a Manager of shared session workers (8 sessions each) on
// pool, keeping checkpoints in the dir: store at dir, taken delay after a
// call.
func durableOn(t *testing.T, pool *supervisor.Pool, dir string, delay time.Duration) (*sessions.Manager, *takes) {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := checkpoint.NewKeeper(store, pool, filepath.Join(dir, ".restore"), 0, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &takes{Keeper: k}
	m := sessions.New(sessions.Options{
		Instance: "test-1",
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		},
		Anonymous:       "anonymous",
		Log:             testLogger(t),
		PerHost:         8,
		Checkpoints:     rec,
		CheckpointDelay: delay,
		Limits:          sessions.Limits{Spares: -1},
	})
	return m, rec
}

// Sessions of one shared worker whose last calls have no checkpoint get one
// checkpoint of the worker, kept as each one's record (not one each); a
// Manager started again on the store continues each from its own record,
// with its own namespace only.
func TestSharedSessionsShareOneCheckpointAndRestoreApart(t *testing.T) {
	pool := checkpointingPool(t)
	dir := t.TempDir()
	m, rec := durableOn(t, pool, dir, time.Hour) // only the ones taken when it closes
	a := callAs(t, m, "anonymous", sessions.NewSession, "x = 'a'\nopen('a.txt', 'w').write('A')").SessionID
	b := callAs(t, m, "anonymous", sessions.NewSession, "y = 'b'\nopen('b.txt', 'w').write('B')").SessionID
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 1 || rec.got[0] != 2 {
		t.Errorf("checkpoints taken at close, by sessions kept for: %v; want one, for both sessions", rec.got)
	}

	again, _ := durableOn(t, pool, dir, time.Hour)
	t.Cleanup(func() { _ = again.Close(context.Background()) })
	peek := "import os\n[%s, open('%s.txt').read(), '%s' in globals(), os.path.exists('%s.txt'), os.listdir('/sessions')]"
	for _, tc := range []struct{ id, code, want string }{
		{a, fmt.Sprintf(peek, "x", "a", "y", "b"), `["a","A",false,false,[]]`},
		{b, fmt.Sprintf(peek, "y", "b", "x", "a"), `["b","B",false,false,[]]`},
	} {
		if got := compact(callAs(t, again, "anonymous", tc.id, tc.code).Value); got != tc.want {
			t.Errorf("session %s continued: %s, want %s", tc.id, got, tc.want)
		}
	}
}

// checkpointingPool is a one-worker pool whose session workers take
// checkpoints, closed with the test.
func checkpointingPool(t *testing.T) *supervisor.Pool {
	t.Helper()
	needRuntime(t)
	pool, err := supervisor.NewPool(runtime, supervisor.Config{Workers: 1, Checkpoints: true}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pool.Close(ctx)
	})
	return pool
}

// A shared worker that is lost is no longer counted (Stats.Hosts, and
// against Limits.MaxHosts) while sessions with checkpoints wait on it to be
// restored: the session whose call lost it is on a restored worker, the
// other not yet.
func TestLostHostIsNotCountedWhileItsSessionsWait(t *testing.T) {
	m, _ := durableOn(t, checkpointingPool(t), t.TempDir(), 50*time.Millisecond)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	a := callAs(t, m, "anonymous", sessions.NewSession, "x = 1").SessionID
	b := callAs(t, m, "anonymous", sessions.NewSession, "y = 2").SessionID
	deadline := time.Now().Add(time.Minute)
	for m.Stats().Checkpoints < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoints of both sessions within a minute: %+v", m.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := m.Run(t.Context(), sessions.Call{Session: a, Job: supervisor.Job{ID: "exit", Code: "import js\njs.Deno.exit(3)", Client: "anonymous"}}, nil)
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("the call that lost the worker: %v, checkpoint %+v", err, res.Checkpoint)
	}
	if st := m.Stats(); st.Hosts != 1 {
		t.Errorf("%d session workers counted after one was lost and one restored, want 1", st.Hosts)
	}
	if got := compact(callAs(t, m, "anonymous", b, "y").Value); got != "2" {
		t.Errorf("b after the lost worker: %s, want 2", got)
	}
	if st := m.Stats(); st.Hosts != 2 {
		t.Errorf("%d session workers counted once both were restored, want 2", st.Hosts)
	}
}

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
// pool, keeping checkpoints in the dir: store at dir.
func durableOn(t *testing.T, pool *supervisor.Pool, dir string) (*sessions.Manager, *takes) {
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
		CheckpointDelay: time.Hour, // only the ones taken when it closes
		Limits:          sessions.Limits{Spares: -1},
	})
	return m, rec
}

// Sessions of one shared worker whose last calls have no checkpoint get one
// checkpoint of the worker, kept as each one's record (not one each); a
// Manager started again on the store continues each from its own record,
// with its own namespace only.
func TestSharedSessionsShareOneCheckpointAndRestoreApart(t *testing.T) {
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
	dir := t.TempDir()
	m, rec := durableOn(t, pool, dir)
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

	again, _ := durableOn(t, pool, dir)
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

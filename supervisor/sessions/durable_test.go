package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// takes records the checkpoints a real Keeper takes: how many sessions
// each was kept for.
type takes struct {
	*checkpoint.Keeper
	mu   sync.Mutex
	got  []int
	kill int // the take (1 the first) whose worker is killed as it starts; 0: none
}

func (k *takes) Take(ctx context.Context, w sessions.Worker, saved []sessions.Saved) error {
	k.mu.Lock()
	k.got = append(k.got, len(saved))
	kill := len(k.got) == k.kill
	k.mu.Unlock()
	if kill {
		w.Kill("killed by the test as its checkpoint starts")
	}
	return k.Keeper.Take(ctx, w, saved)
}

// durableOn is a Manager of shared session workers (8 sessions each) on
// pool, keeping checkpoints in the dir: store at dir, taken delay after a
// call.
func durableOn(t *testing.T, pool *supervisor.Pool, dir string, delay time.Duration) (*sessions.Manager, *takes) {
	t.Helper()
	return durableWith(t, pool, dir, delay, sessions.Limits{Spares: -1})
}

// durableWith is durableOn with limits.
func durableWith(t *testing.T, pool *supervisor.Pool, dir string, delay time.Duration, limits sessions.Limits) (*sessions.Manager, *takes) {
	t.Helper()
	store, err := checkpoint.OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	key, err := checkpoint.DirKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := checkpoint.NewKeeper(store, key, pool, filepath.Join(dir, ".restore"), 0, testLogger(t))
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
		Leases:          k,
		CheckpointDelay: delay,
		Limits:          limits,
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
	pool, err := supervisor.NewPool(testruntime.Get(t), supervisor.Config{Workers: 1, Checkpoints: true}, testLogger(t))
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
	waitStats(t, m, time.Minute, "checkpoints of both sessions", func(st sessions.Stats) bool { return st.Checkpoints >= 2 })
	loseWorker(t, m, a)
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

// loseWorker makes session id's call end its worker's process, and wants
// the call to say so with the session's checkpoint to restore from.
func loseWorker(t *testing.T, m *sessions.Manager, id string) {
	t.Helper()
	res, err := m.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: "exit", Code: "import js\njs.Deno.exit(3)", Client: "anonymous"}}, nil)
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("the call that lost the worker: %v, checkpoint %+v", err, res.Checkpoint)
	}
}

// Sessions restored from a lost shared worker's checkpoints each get a
// worker of their own, within Limits.MaxHosts: past it a restore is refused
// with an error that says so, and the session and its checkpoint stay for
// a later call, which restores it once a worker is free (here, when
// another session has ended and its worker is empty). So a client cannot
// make pyrun start a worker per session by losing the worker that holds
// them.
func TestRestoresStayWithinMaxSessionWorkers(t *testing.T) {
	m, _ := durableWith(t, checkpointingPool(t), t.TempDir(), 50*time.Millisecond, sessions.Limits{Spares: -1, MaxHosts: 2})
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	a := callAs(t, m, "anonymous", sessions.NewSession, "x = 'a'").SessionID
	b := callAs(t, m, "anonymous", sessions.NewSession, "x = 'b'").SessionID
	c := callAs(t, m, "anonymous", sessions.NewSession, "x = 'c'").SessionID
	waitStats(t, m, time.Minute, "checkpoints of the three sessions", func(st sessions.Stats) bool { return st.Checkpoints >= 3 })
	loseWorker(t, m, a)
	if got := compact(callAs(t, m, "anonymous", b, "x").Value); got != `"b"` {
		t.Errorf("b, restored onto the second worker: %s", got)
	}
	refusals := m.Stats().HostRefusals
	_, err := m.Run(t.Context(), sessions.Call{Session: c, Job: supervisor.Job{ID: "c", Code: "x", Client: "anonymous"}}, nil)
	if !errors.Is(err, sessions.ErrNoRoom) || !strings.Contains(err.Error(), "max_session_workers") || !strings.Contains(err.Error(), "kept") {
		t.Errorf("c's restore with two workers running and MaxHosts 2: %v, want ErrNoRoom naming max_session_workers", err)
	}
	if st := m.Stats(); st.Hosts != 2 || st.HostRefusals != refusals+1 {
		t.Errorf("after the refused restore: %d session workers, %d refusals (before: %d); want 2 and one more", st.Hosts, st.HostRefusals, refusals)
	}
	if _, err := m.Run(t.Context(), sessions.Call{Session: b, End: true, Job: supervisor.Job{ID: "end b", Client: "anonymous"}}, nil); err != nil {
		t.Fatalf("ending b: %v", err)
	}
	// b's namespace is closed off the call's path: c's client calls again
	// until its worker is free, as the error says to.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := m.Run(t.Context(), sessions.Call{Session: c, Job: supervisor.Job{ID: "c again", Code: "x", Client: "anonymous"}}, nil)
		if errors.Is(err, sessions.ErrNoRoom) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil || compact(res.Value) != `"c"` {
			t.Errorf("c, once b had ended and its worker was empty: %v, %s", err, res.Value)
		}
		break
	}
	if got := compact(callAs(t, m, "anonymous", a, "x").Value); got != `"a"` {
		t.Errorf("a, on its restored worker: %s", got)
	}
	if st := m.Stats(); st.Hosts != 2 {
		t.Errorf("%d session workers at the end, want 2", st.Hosts)
	}
}

// A checkpoint that fails with its worker lost (here killed as it is
// taken) keeps the session's older record: the next call goes on from it,
// and says so (issue 36, item 6).
func TestCheckpointThatLosesItsWorkerKeepsTheOlderRecord(t *testing.T) {
	m, rec := durableOn(t, checkpointingPool(t), t.TempDir(), 50*time.Millisecond)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	rec.mu.Lock()
	rec.kill = 2
	rec.mu.Unlock()
	id := callAs(t, m, "anonymous", sessions.NewSession, "x = 1").SessionID
	waitStats(t, m, time.Minute, "the first checkpoint", func(st sessions.Stats) bool { return st.Checkpoints >= 1 })
	callAs(t, m, "anonymous", id, "x = 2")
	waitStats(t, m, time.Minute, "the failed checkpoint", func(st sessions.Stats) bool { return st.CheckpointFailures >= 1 })
	res := callAs(t, m, "anonymous", id, "x")
	if res.Value != "1" || res.Checkpoint == nil || res.Checkpoint.AfterCall != 1 {
		t.Fatalf("the call after the failed checkpoint: %s %+v, want 1 from the checkpoint after call 1", res.Value, res.Checkpoint)
	}
	if res = callAs(t, m, "anonymous", id, "x + 1"); res.Value != "2" || res.Checkpoint != nil {
		t.Fatalf("the call after: %s %+v", res.Value, res.Checkpoint)
	}
}

// One client's sessions restored from a lost shared worker, each onto a
// worker of its own, count against the client's share of the session
// workers (Limits.ClientMaxHosts, by default half of MaxHosts): past it a
// restore is refused, its session and checkpoint kept, and another
// client's new session still gets a worker. Before, the four sessions of
// one client took the four workers, and the other client's "new" was
// refused. Control: with a share of every worker, all four are restored,
// and the other client is refused, as the bound says.
func TestRestoresOfOneClientKeepWithinItsShare(t *testing.T) {
	pool := checkpointingPool(t)
	for _, tc := range []struct {
		share, restored int
		otherGetsOne    bool
	}{
		{0, 2, true}, // the default: half of the 4
		{4, 4, false},
	} {
		t.Run(fmt.Sprintf("share %d", tc.share), func(t *testing.T) {
			m, _ := durableWith(t, pool, t.TempDir(), 50*time.Millisecond,
				sessions.Limits{Spares: -1, Max: 16, MaxHosts: 4, ClientMax: 8, ClientMaxHosts: tc.share})
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			var ids []string
			for i := range 4 {
				ids = append(ids, callAs(t, m, "alice", sessions.NewSession, fmt.Sprintf("x = %d", i)).SessionID)
			}
			waitStats(t, m, time.Minute, "checkpoints of the four sessions", func(st sessions.Stats) bool { return st.Checkpoints >= 4 })
			res, err := m.Run(t.Context(), sessions.Call{Session: ids[0], Job: supervisor.Job{ID: "exit", Code: "import js\njs.Deno.exit(3)", Client: "alice"}}, nil)
			if err != nil || res.Checkpoint == nil {
				t.Fatalf("the call that lost the worker: %v, checkpoint %+v", err, res.Checkpoint)
			}
			restored := 1
			for i, id := range ids[1:] {
				res, err := m.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: "x", Code: "x", Client: "alice"}}, nil)
				switch {
				case err == nil && compact(res.Value) == fmt.Sprint(i+1):
					restored++
				case errors.Is(err, sessions.ErrNoRoom) && strings.Contains(err.Error(), "client_max_session_workers") && strings.Contains(err.Error(), "kept"):
				default:
					t.Errorf("alice's session %d after the loss: %v %q, want it restored or refused naming client_max_session_workers", i+1, err, res.Value)
				}
			}
			if restored != tc.restored {
				t.Errorf("%d of alice's 4 sessions restored, want %d", restored, tc.restored)
			}
			_, err = m.Run(t.Context(), sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "bob", Code: "1", Client: "bob"}}, nil)
			if got := err == nil; got != tc.otherGetsOne {
				t.Errorf("bob's new session with alice's sessions restored: %v; want it to get a worker: %v", err, tc.otherGetsOne)
			}
		})
	}
}

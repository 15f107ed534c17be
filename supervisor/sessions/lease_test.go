package sessions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// A session whose every record in the store fails its checks (here its
// checksum) is not answered as unknown, which would read as a mistyped
// id: the call says its checkpoint is damaged and its state lost. Its
// records stay, for whoever looks into the damage. Control: another
// session of the same store continues, and an id the store does not know
// is still unknown.
func TestDamagedCheckpointSaysTheStateIsLost(t *testing.T) {
	pool := checkpointingPool(t)
	dir := t.TempDir()
	m, _ := durableOn(t, pool, dir, time.Hour) // only the ones taken when it closes
	a := callAs(t, m, "anonymous", sessions.NewSession, "x = 'a'").SessionID
	b := callAs(t, m, "anonymous", sessions.NewSession, "x = 'b'").SessionID
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _ := filepath.Glob(filepath.Join(dir, a+"*.ckpt"))
	if len(recs) == 0 {
		t.Fatalf("no record of %s after the close", a)
	}
	for _, p := range recs {
		damage(t, p)
	}

	again, _ := durableOn(t, pool, dir, time.Hour)
	t.Cleanup(func() { _ = again.Close(context.Background()) })
	_, err := again.Run(t.Context(), sessions.Call{Session: a, Job: supervisor.Job{ID: "a", Code: "x", Client: "anonymous"}}, nil)
	if !errors.Is(err, sessions.ErrLost) || errors.Is(err, sessions.ErrUnknown) ||
		!strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "state is lost") {
		t.Errorf("a call to the session whose records are damaged: %v; want ErrLost saying its checkpoint is damaged and its state lost", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, a+"*.ckpt")); len(left) != len(recs) {
		t.Errorf("the damaged records after the call: %v, want them kept (%v)", left, recs)
	}
	if got := compact(callAs(t, again, "anonymous", b, "x").Value); got != `"b"` {
		t.Errorf("the intact session of the same store: %s, want \"b\"", got)
	}
	unknown := "test-1.0123456789abcdef0123456789abcdef"
	_, err = again.Run(t.Context(), sessions.Call{Session: unknown, Job: supervisor.Job{ID: "u", Code: "x", Client: "anonymous"}}, nil)
	if !errors.Is(err, sessions.ErrUnknown) {
		t.Errorf("an id the store does not know: %v, want ErrUnknown", err)
	}
}

// damage flips a byte in the middle of the file at path.
func damage(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// instanceOn is a Manager named instance, of shared session workers on
// pool, keeping checkpoints (taken delay after a call) and leases in the
// dir: store at dir, which other Managers share; closed with the test.
func instanceOn(t *testing.T, pool *supervisor.Pool, instance, dir string, delay time.Duration) *sessions.Manager {
	t.Helper()
	store, err := checkpoint.OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	key, err := checkpoint.DirKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := checkpoint.NewKeeper(store, key, pool, filepath.Join(dir, ".restore-"+instance), 0, testLogger(t).Named(instance))
	if err != nil {
		t.Fatal(err)
	}
	k.SetLeases(checkpoint.Holder(instance), 2*time.Second)
	m := sessions.New(sessions.Options{
		Instance: instance,
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		},
		Anonymous:       "anonymous",
		Log:             testLogger(t).Named(instance),
		PerHost:         8,
		Checkpoints:     k,
		Leases:          k,
		CheckpointDelay: delay,
		Limits:          sessions.Limits{Spares: -1},
		MoveWait:        20 * time.Second,
	})
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// A call by another client, on another instance, for a session one
// instance serves is refused as unknown before anything moves: the owner
// is checked from the store (the owner the lease was taken for, before
// the session has a record; then its record), not after a hand-over that
// would close the owner's live worker (and stop its asyncio tasks).
// Control: the owner's own call on the other instance moves the session.
func TestForeignCallMovesNoSessionOfAnotherInstance(t *testing.T) {
	pool := checkpointingPool(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		what  string
		delay time.Duration
	}{
		{"before its first checkpoint (the lease says whose it is)", time.Hour},
		{"with a checkpoint (its record says whose it is)", 50 * time.Millisecond},
	} {
		t.Run(tc.what, func(t *testing.T) {
			a := instanceOn(t, pool, "box-a", dir, tc.delay)
			b := instanceOn(t, pool, "box-b", dir, tc.delay)
			id := callAs(t, a, "alice", sessions.NewSession,
				"import asyncio\nticks = 0\nasync def tick():\n    global ticks\n    while True:\n        ticks += 1\n        await asyncio.sleep(0.01)\ntask = asyncio.ensure_future(tick())").SessionID
			if tc.delay < time.Hour {
				waitStats(t, a, time.Minute, "the session's checkpoint", func(st sessions.Stats) bool { return st.Checkpoints >= 1 })
			}
			began := time.Now()
			_, err := b.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: "bob", Code: "ticks", Client: "bob"}}, nil)
			if !errors.Is(err, sessions.ErrUnknown) {
				t.Errorf("bob's call on box-b for alice's session: %v, want ErrUnknown", err)
			}
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("bob's refusal took %s: it waited for a hand-over", took)
			}
			lease, _ := os.ReadFile(filepath.Join(dir, id+".lease"))
			if strings.Contains(string(lease), `"move"`) {
				t.Errorf("bob's call asked box-a to hand alice's session over: lease %s", lease)
			}
			// The task ticks while the worker waits for calls: given time, it
			// has ticked, and is still running.
			const ticked = "seen = ticks\nfor _ in range(500):\n    if ticks > seen: break\n    await asyncio.sleep(0.01)\n[task.done(), ticks > seen]"
			if got := compact(callAs(t, a, "alice", id, ticked).Value); got != "[false,true]" {
				t.Errorf("alice's session on box-a after bob's call: %s, want its task still running", got)
			}
			if st := a.Stats(); st.MovesOut != 0 || st.Restores != 0 {
				t.Errorf("box-a after bob's call: %d moves out, %d restores; want none", st.MovesOut, st.Restores)
			}
			// Alice's own call on box-b moves it (after its checkpoint).
			// (A restored task that sleeps stays pending for good:
			// docs/sessions.md, what a restored session has.)
			if got := compact(callAs(t, b, "alice", id, "[task.done(), ticks > 0]").Value); got != "[false,true]" {
				t.Errorf("alice's call on box-b: %s, want her task and its ticks", got)
			}
			if st := b.Stats(); st.MovesIn != 1 {
				t.Errorf("box-b after alice's call: %d moves in, want 1", st.MovesIn)
			}
		})
	}
}

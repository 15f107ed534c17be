package supervisor_test

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// ownSnapshots is the test runtime with a snapshot folder of the test's own.
func ownSnapshots(t *testing.T) *supervisor.Runtime {
	t.Helper()
	own := *testruntime.Get(t)
	own.SnapshotDir = t.TempDir()
	return &own
}

// snapshotPool starts a pool of real workers on rt, closed with the test.
func snapshotPool(t *testing.T, rt *supervisor.Runtime, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	p, err := supervisor.NewPool(rt, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	supervisor.CloseAtEnd(t, p)
	return p
}

// waitLong polls cond until it holds; real workers may take a while to
// start on a busy machine, so the test fails only after two minutes.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within two minutes", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkersStartFromASnapshot makes a real snapshot, starts a pool from
// it, and checks that what must not be in a snapshot works per process:
// interrupts of busy loops, time.sleep and asyncio.sleep, the memory cap,
// fresh random state, and replacements that start from the snapshot too.
func TestWorkersStartFromASnapshot(t *testing.T) {
	rt := ownSnapshots(t)
	cfg := supervisor.Config{Workers: 2, Timeout: time.Second, MemoryLimit: 256 << 20}
	snap, err := supervisor.EnsureSnapshot(t.Context(), rt, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Built || snap.Size < 1<<20 {
		t.Fatalf("snapshot %+v, want one just made, of at least 1 MiB", snap)
	}
	st, err := os.Stat(snap.Path)
	if err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("snapshot file: %v, mode %v; want it read-only", err, st.Mode())
	}
	if again, err := supervisor.EnsureSnapshot(t.Context(), rt, cfg, testLogger(t)); err != nil ||
		again.Built || again.SHA256 != snap.SHA256 {
		t.Fatalf("EnsureSnapshot again: %+v, %v; want the same one, not made again", again, err)
	}

	p := snapshotPool(t, rt, cfg)
	waitLong(t, "two ready workers", func() bool { return p.Stats().Ready == 2 })
	if s := p.Stats().Counts.Starts; s["snapshot"] != 2 || s["plain"] != 0 {
		t.Fatalf("starts %v, want 2 from the snapshot", s)
	}

	t.Run("a call", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "print('hello')\n6 * 7"})
		if res.Status != supervisor.StatusSuccess || res.Stdout != "hello\n" || res.Value != "42" {
			t.Errorf("got %s %q %q %s", res.Status, res.Stdout, res.Value, res.Error)
		}
		if res.InWorker <= 0 || res.InWorker > res.Duration {
			t.Errorf("time in the worker %s, of %s in all", res.InWorker, res.Duration)
		}
	})

	t.Run("random state per worker", func(t *testing.T) {
		// Two calls at once land on the two workers.
		var wg sync.WaitGroup
		values := make([]string, 2)
		for i := range values {
			wg.Go(func() {
				res, err := p.Run(t.Context(), supervisor.Job{ID: t.Name(), Code: "import random, time\ntime.sleep(0.3)\nrandom.random()"}, nil)
				if err != nil || res.Status != supervisor.StatusSuccess {
					t.Errorf("call %d: %v %s %s", i, err, res.Status, res.Error)
				}
				values[i] = res.Value + " " + res.Worker
			})
		}
		wg.Wait()
		a, b := strings.Fields(values[0]), strings.Fields(values[1])
		if len(a) != 2 || len(b) != 2 || a[1] == b[1] {
			t.Fatalf("calls %q and %q, want one on each worker", values[0], values[1])
		}
		if a[0] == b[0] {
			t.Errorf("workers %s and %s drew the same random number %s", a[1], b[1], a[0])
		}
	})

	for _, tc := range []struct{ name, code string }{
		{"interrupt a busy loop", "print('before')\nwhile True:\n    pass"},
		{"interrupt time.sleep", "import time\nprint('before')\ntime.sleep(100)"},
		{"interrupt asyncio.sleep", "import asyncio\nprint('before')\nawait asyncio.sleep(100)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			killed := p.Stats().Counts.Restarts[supervisor.RestartInterrupt]
			res := run(t, p, supervisor.Job{Code: tc.code})
			if res.Status != supervisor.StatusTimeout || res.Stdout != "before\n" {
				t.Errorf("got %s, stdout %q; want timeout after the output", res.Status, res.Stdout)
			}
			// The interrupt reached Python: a traceback, and no kill.
			if !strings.Contains(res.Error, "Traceback") {
				t.Errorf("error %q has no traceback: the worker was killed, not interrupted", res.Error)
			}
			if now := p.Stats().Counts.Restarts[supervisor.RestartInterrupt]; now != killed {
				t.Errorf("a worker was killed after the interrupt")
			}
		})
	}

	t.Run("memory cap", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "x = bytearray(300 * 2**20)"})
		if res.Status != supervisor.StatusMemoryError || !strings.Contains(res.Error, "MemoryError") {
			t.Errorf("got %s %s, want a memory-error", res.Status, res.Error)
		}
		// The worker is retired and the pool filled again, from the
		// snapshot (with its client's workers and the fresh ones beside
		// them, the pool may have started more than one since).
		waitLong(t, "the pool filled again", func() bool {
			s := p.Stats()
			return s.Counts.Restarts[supervisor.RestartMemory] == 1 && s.Starting == 0 && s.Ready >= 2 &&
				s.Counts.Starts["snapshot"] >= 3
		})
		if s := p.Stats().Counts.Starts; s["plain"] != 0 {
			t.Errorf("starts %v, want all from the snapshot", s)
		}
	})
}

// TestIsolationProcessStartsFromTheSnapshot checks that every call gets a
// worker that never ran code, started from the snapshot.
func TestIsolationProcessStartsFromTheSnapshot(t *testing.T) {
	p := snapshotPool(t, ownSnapshots(t), supervisor.Config{Workers: 1, Isolation: supervisor.IsolationProcess})
	waitLong(t, "a ready worker", func() bool { return p.Stats().Ready == 1 })
	// JavaScript globals outlive a call on a reused worker; not here.
	code := "import js\nseen = hasattr(js.globalThis, 'pyrunMark')\njs.globalThis.pyrunMark = 1\nseen"
	for i := range 3 {
		res := run(t, p, supervisor.Job{Code: code})
		if res.Status != supervisor.StatusSuccess || res.Value != "false" {
			t.Errorf("call %d: %s %q %s; want a worker that never ran code", i, res.Status, res.Value, res.Error)
		}
	}
	waitLong(t, "the spare", func() bool { return p.Stats().Ready == 1 })
	if s := p.Stats().Counts.Starts; s["snapshot"] != 4 || s["plain"] != 0 {
		t.Errorf("starts %v, want 4 from the snapshot", s)
	}
}

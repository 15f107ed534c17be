package supervisor_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// These tests run the real Deno + Pyodide worker.

func realPool(t *testing.T, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	p, err := supervisor.NewPool(testruntime.Get(t), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	supervisor.CloseAtEnd(t, p)
	return p
}

// waitReady waits until n workers are ready. Real workers take seconds to
// start, many more on a loaded machine, hence a bound longer than waitFor's.
func waitReady(t *testing.T, p *supervisor.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for p.Stats().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers not ready within 2 minutes: %+v", n, p.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clipString is s cut to n bytes, for a test's message.
func clipString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func run(t *testing.T, p *supervisor.Pool, job supervisor.Job) supervisor.Result {
	t.Helper()
	if job.ID == "" {
		job.ID = fmt.Sprint(time.Now().UnixNano())
	}
	res, err := p.Run(t.Context(), job, nil)
	if err != nil {
		t.Fatalf("run %q: %v", job.Code, err)
	}
	return res
}

func TestRealWorkerLifecycle(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, InterruptGrace: 500 * time.Millisecond})

	res := run(t, p, supervisor.Job{Code: "print('hi')\n6 * 7"})
	if res.Status != supervisor.StatusSuccess || res.Stdout != "hi\n" || res.Value != "42" {
		t.Fatalf("first call: %+v", res)
	}
	first := res.Worker

	t.Run("an interruptible timeout keeps the worker", func(t *testing.T) {
		for _, code := range []string{
			"print('spinning')\nwhile True: pass",
			"import time\nprint('spinning')\ntime.sleep(100)",
			"import asyncio\nprint('spinning')\nawait asyncio.sleep(100)",
		} {
			start := time.Now()
			res := run(t, p, supervisor.Job{Code: code, Timeout: 500 * time.Millisecond})
			// The ceiling leaves room for a loaded machine; that the
			// interrupt, not a kill, ended it is the worker kept (below).
			within(t, "the timed-out call", time.Since(start), 450*time.Millisecond, 2*time.Second)
			if res.Status != supervisor.StatusTimeout || res.Stdout != "spinning\n" {
				t.Errorf("%q: status %s stdout %q, want timeout with the output so far", code, res.Status, res.Stdout)
			}
			if res.Worker != first {
				t.Errorf("%q ran on %s, want %s: an interrupted worker is reused", code, res.Worker, first)
			}
		}
		if n := len(p.Stats().Counts.Restarts); n != 0 {
			t.Errorf("restarts = %v, want none", p.Stats().Counts.Restarts)
		}
	})

	t.Run("a C loop needs a kill and the worker is replaced", func(t *testing.T) {
		start := time.Now()
		res := run(t, p, supervisor.Job{Code: "sum(range(10**12))", Timeout: 500 * time.Millisecond})
		within(t, "the killed call", time.Since(start), 900*time.Millisecond, 3*time.Second)
		if res.Status != supervisor.StatusTimeout || res.Status.ExitCode() != 124 {
			t.Errorf("status %s, want timeout", res.Status)
		}
		next := run(t, p, supervisor.Job{Code: "1 + 1"})
		if next.Status != supervisor.StatusSuccess || next.Worker == res.Worker {
			t.Errorf("next call: status %s on %s, want success on a new worker", next.Status, next.Worker)
		}
	})

	t.Run("a worker that exits is replaced", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "print('bye')\nimport js\njs.Deno.exit(7)"})
		if res.Status != supervisor.StatusCrashed || res.Stdout != "bye\n" {
			t.Errorf("status %s stdout %q, want crashed with the output so far", res.Status, res.Stdout)
		}
		next := run(t, p, supervisor.Job{Code: "'still here'"})
		if next.Status != supervisor.StatusSuccess || next.Value != `"still here"` {
			t.Errorf("next call: %+v", next)
		}
	})
}

func TestRealWorkerMemoryLimit(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, MemoryLimit: 256 << 20})
	res := run(t, p, supervisor.Job{Code: "x = bytearray(400 * 2**20)"})
	if res.Status != supervisor.StatusMemoryError || !strings.Contains(res.Error, "MemoryError") {
		t.Fatalf("status %s error %q, want memory-error", res.Status, res.Error)
	}
	// The heap never shrinks: the worker is retired after the call.
	next := run(t, p, supervisor.Job{Code: "len(bytearray(10 * 2**20))"})
	if next.Status != supervisor.StatusSuccess || next.Worker == res.Worker {
		t.Errorf("next call: status %s on %s, want success on a new worker", next.Status, next.Worker)
	}
	if got := p.Stats().Counts.Restarts[supervisor.RestartMemory]; got != 1 {
		t.Errorf("restarts = %v, want one for memory", p.Stats().Counts.Restarts)
	}
}

// TestUsedWorkersServeBeforeFreshOnes: an idle worker that has run calls
// gets the next one before a worker that has run none, whose wasm is still
// on V8's baseline code (a pool's later workers, replacements); so does the
// fresh worker a call took once its client's used one was gone.
func TestUsedWorkersServeBeforeFreshOnes(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 2})
	first := run(t, p, supervisor.Job{Code: "1"}).Worker
	// The second worker starts after the first call and joins the pool idle.
	waitLong(t, "two workers ready", func() bool { return p.Stats().Ready == 2 })
	for i := range 3 {
		if res := run(t, p, supervisor.Job{Code: "2"}); res.Worker != first {
			t.Fatalf("call %d after the second worker joined ran on %s, want %s (used) before it", i+2, res.Worker, first)
		}
	}
	// The used worker exits; its replacement joins below the other fresh one.
	if res := run(t, p, supervisor.Job{Code: "import js\njs.Deno.exit(7)"}); res.Status != supervisor.StatusCrashed || res.Worker != first {
		t.Fatalf("exit: %s on %s, want crashed on %s", res.Status, res.Worker, first)
	}
	// Its client owns no worker now: the next call takes a fresh one (the
	// one idle longest), which then serves it before any other.
	waitLong(t, "fresh workers ready", func() bool { return p.Stats().Ready >= 2 })
	second := run(t, p, supervisor.Job{Code: "3"}).Worker
	if first != "worker-1" || second == first {
		t.Fatalf("calls ran on %s, then after its exit on %s; want worker-1, then another", first, second)
	}
	for i := range 3 {
		if res := run(t, p, supervisor.Job{Code: "4"}); res.Worker != second {
			t.Fatalf("call %d ran on %s, want %s: the worker used since, before the fresh ones", i+1, res.Worker, second)
		}
	}
}

func TestRealWorkersRunInParallel(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 2})
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 2 })
	// Each call spins for 1s of wall time.
	code := "import time\nt = time.time()\nwhile time.time() - t < 1: pass\n'done'"
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if res := run(t, p, supervisor.Job{Code: code}); res.Status != supervisor.StatusSuccess {
				t.Errorf("status %s: %s", res.Status, res.Error)
			}
		})
	}
	wg.Wait()
	within(t, "4 one-second calls on 2 workers", time.Since(start), 1900*time.Millisecond, 3500*time.Millisecond)
}

func TestRealIsolationProcessUsesFreshWorkers(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 2, Isolation: supervisor.IsolationProcess})
	seen := map[string]bool{}
	for i := range 3 {
		res := run(t, p, supervisor.Job{Code: "import sys\nsys.pyrun_mark = getattr(sys, 'pyrun_mark', 0) + 1\nsys.pyrun_mark"})
		if res.Status != supervisor.StatusSuccess || res.Value != "1" {
			t.Errorf("call %d: status %s value %s, want a worker that never ran code", i, res.Status, res.Value)
		}
		if seen[res.Worker] {
			t.Errorf("call %d reused %s", i, res.Worker)
		}
		seen[res.Worker] = true
	}
}

func TestRealWorkerEnvironmentIsEmpty(t *testing.T) {
	t.Setenv("PYRUN_CANARY", "host-secret")
	p := realPool(t, supervisor.Config{Workers: 1})
	res := run(t, p, supervisor.Job{Code: `import os, js
found = [k for k, v in os.environ.items() if 'host-secret' in v]
try:
    js.Deno.env.get('PYRUN_CANARY')
    denied = False
except Exception as e:
    denied = 'NotCapable' in str(e)
[found, denied]`})
	if res.Status != supervisor.StatusSuccess || strings.Join(strings.Fields(res.Value), "") != "[[],true]" {
		t.Errorf("got %s %s %s, want no host variable and env access denied", res.Status, res.Value, res.Error)
	}
}

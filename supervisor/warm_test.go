package supervisor_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

func init() {
	// "warming" announces warming calls in its ready event and keeps a CPU
	// busy while it waits for its first call, as a real worker's warming
	// calls do (pyodide-host/warm.ts); after "spin-after" it spins forever.
	fakeModes["warming"] = func() {
		fakeSend(map[string]any{"type": "ready", "engine": "python", "protocol": supervisor.ProtocolVersion,
			"pyodide": "fake", "python": "fake", "warm_calls": 200})
		warming := make(chan struct{})
		go func() {
			for {
				select {
				case <-warming:
					return
				default:
				}
			}
		}()
		var once sync.Once
		fakeServe(func(req map[string]any) {
			once.Do(func() { close(warming) })
			fakeEcho(req)
			if req["code"] == "spin-after" {
				go func() {
					for {
					}
				}()
			}
		})
	}
}

// TestWarmingWorkerIsNotKilledAsSpinning: a worker busy with its warming
// calls before its first call is running only pyrun's own code, and is not
// judged by the idle CPU checks; once it has had a call, it is.
func TestWarmingWorkerIsNotKilledAsSpinning(t *testing.T) {
	p := fakePool(t, "warming", supervisor.Config{Workers: 1})
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
	// Without the exemption the spin is noticed within 3 checks (600 ms).
	time.Sleep(10 * supervisor.HealthInterval)
	if n := restarts(p.Stats()); n != 0 {
		t.Fatalf("restarts %v while warming, want none", p.Stats().Counts.Restarts)
	}
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "spin-after"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess || res.Worker != "worker-1" {
		t.Fatalf("%v %+v, want success on worker-1", err, res)
	}
	start := time.Now()
	supervisor.WaitUntil(t, func() bool { s := p.Stats(); return s.Counts.Restarts[supervisor.RestartRecycle] == 1 && s.Ready == 1 })
	within(t, "noticing the spin after a call", time.Since(start), 3*supervisor.HealthInterval, 5*time.Second)
}

// TestWarmingSessionWorkerIsNotKilled: a session's worker started ahead
// (a spare) runs its warming calls while it waits for its session, which
// are pyrun's own code and not judged, as for the pool's. Before, a
// dedicated worker had no ready time, so its warming was judged at once
// and the spare was killed for idle CPU 10 s after its start.
func TestWarmingSessionWorkerIsNotKilled(t *testing.T) {
	p := fakePool(t, "warming", supervisor.Config{Workers: 1})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	time.Sleep(supervisor.SessionIdleWindow + 3*time.Second)
	if why := d.Lost(); why != "" {
		t.Fatalf("the warming session worker was lost: %s", why)
	}
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("its first call: %v %+v", err, res)
	}
}

// TestCallsDuringWarmingAreServed: a first call that comes while a fresh
// worker runs its warming calls, at a moment of any kind (before warming
// starts, mid-call, between two), gets its own output and nothing of
// theirs, on a worker whose state starts with it.
func TestCallsDuringWarmingAreServed(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, WarmCalls: 10000})
	// Warming starts at one of the pool's health checks (every 200 ms)
	// after 50 ms idle; a warming call takes a few milliseconds, and so
	// does the rest after it; a batch, 20 of them.
	for i, delay := range []time.Duration{0, 60, 150, 220, 260, 300, 340, 420, 600} {
		d, err := p.StartDedicated(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay * time.Millisecond)
		code := fmt.Sprintf("print(%d)\nsorted(k for k in globals() if not k.startswith('__'))", i)
		res, err := d.Run(t.Context(), supervisor.Job{ID: fmt.Sprint(i), Code: code}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess || res.Stdout != fmt.Sprintf("%d\n", i) || res.Stderr != "" || res.Value != "[]" {
			t.Fatalf("call %d ms after ready: %v, %s, stdout %q, stderr %q, value %q: %s", delay, err, res.Status, res.Stdout, res.Stderr, res.Value, res.Error)
		}
		d.Close()
	}
}

// TestWarmedWorkerIsFresh: a worker that has run all its warming calls
// gives its first call fresh globals and an empty working folder, as any
// worker does; a session's worker starts its state at its first call.
func TestWarmedWorkerIsFresh(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, WarmCalls: 200})
	waitLong(t, "the worker ready", func() bool { return p.Stats().Ready == 1 })
	pid := p.WorkerPIDs()[0]
	waitWarmed(t, p, pid)
	check := "(sorted(k for k in globals() if not k.startswith('__')), __import__('os').listdir('.'))"
	if res := run(t, p, supervisor.Job{Code: check}); res.Status != supervisor.StatusSuccess || res.Value != "[\n  [],\n  []\n]" || res.Stdout != "" {
		t.Fatalf("after warming: %s, value %q, stdout %q: %s", res.Status, res.Value, res.Stdout, res.Error)
	}

	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	waitWarmed(t, p, d.PID())
	res, err := d.Run(t.Context(), supervisor.Job{ID: "s1", Code: "a = 1\nsorted(k for k in globals() if not k.startswith('__'))"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess || res.Value != "[\n  \"a\"\n]" {
		t.Fatalf("session's first call: %v %+v", err, res)
	}
	res, err = d.Run(t.Context(), supervisor.Job{ID: "s2", Code: "a + 1"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess || res.Value != "2" {
		t.Fatalf("session's second call: %v %+v", err, res)
	}
}

// waitWarmed waits until the worker pid, fresh and idle, has run all its
// warming calls and then stopped using the CPU.
func waitWarmed(t *testing.T, p *supervisor.Pool, pid int) {
	t.Helper()
	// Done when the pool has let the worker run all its warming calls and
	// its CPU has then been quiet for three looks: the last batch has run.
	// (A threshold of CPU used, 1 s, failed in CI: on a faster machine 200
	// warming calls can take less.)
	last, quiet := supervisor.ProcessCPU(t, pid), 0
	waitLong(t, "the warming calls run", func() bool {
		time.Sleep(200 * time.Millisecond)
		used := supervisor.ProcessCPU(t, pid)
		if used-last < 20*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
		last = used
		left := p.WarmingLeft(pid)
		if left < 0 {
			t.Fatalf("worker %d is gone while warming", pid)
		}
		return left == 0 && quiet >= 3
	})
}

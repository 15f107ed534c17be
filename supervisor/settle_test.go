package supervisor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// slowCleanup leaves an object whose finalizer runs only when the worker
// cleans up after the call (a reference cycle, freed by the collection
// that clears a stateless call's leftovers) and then takes the given
// Python statement's time.
func slowCleanup(stmt string) string {
	return "class Slow:\n    def __del__(self):\n        " + stmt + "\n" +
		"s = Slow()\ns.me = s\ndel s\n'done'"
}

// A call's result does not wait for the clean-up after it: the caller has
// it while the worker still clears what the call left, and the next call
// waits for that and finds nothing of it.
func TestResultComesBeforeTheCleanUp(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, Timeout: 30 * time.Second})
	run(t, p, supervisor.Job{Code: "1"})
	began := time.Now()
	res := run(t, p, supervisor.Job{Code: slowCleanup("import time; time.sleep(6)") + "\nleft = 1"})
	if took := time.Since(began); res.Status != supervisor.StatusSuccess || took > 4*time.Second {
		t.Fatalf("call with a 6 s finalizer: %s after %s (%s), want success well before the finalizer ends", res.Status, took, res.Error)
	}
	next := run(t, p, supervisor.Job{Code: "'left' in globals()"})
	if next.Status != supervisor.StatusSuccess || next.Value != "false" || next.Worker != res.Worker {
		t.Fatalf("next call: %s %q on %s, want false on %s (its clean-up done first)", next.Status, next.Value, next.Worker, res.Worker)
	}
	if s := p.Stats(); s.Counts.Calls["success"] != 3 {
		t.Errorf("calls counted: %v, want 3 successes", s.Counts.Calls)
	}
}

// A clean-up that outlasts a call's time limit (the call's own finalizer
// spinning) costs its worker, not the next call: that one goes to a fresh
// worker and succeeds.
func TestCleanUpPastTheLimitReplacesTheWorker(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, Timeout: 2 * time.Second})
	first := run(t, p, supervisor.Job{Code: slowCleanup("while True: pass")})
	if first.Status != supervisor.StatusSuccess || first.Value != `"done"` {
		t.Fatalf("call with a spinning finalizer: %s %q (%s), want its own result, success", first.Status, first.Value, first.Error)
	}
	next := run(t, p, supervisor.Job{Code: "'fine'"})
	if next.Status != supervisor.StatusSuccess || next.Value != `"fine"` {
		t.Fatalf("next call: %s %q (%s), want success", next.Status, next.Value, next.Error)
	}
	if next.Worker == first.Worker {
		t.Fatalf("next call ran on %s, the worker still spinning in its clean-up", next.Worker)
	}
	if n := p.Stats().Counts.Restarts[supervisor.RestartRecycle]; n != 1 {
		t.Errorf("restarts %v, want one recycle: the call left code running", p.Stats().Counts.Restarts)
	}
}

// A session's worker cleans up after each call too (a young collection):
// its next call waits for that, and a clean-up past a call's time limit
// ends the session, saying why, rather than running the next call late.
func TestSessionCleanUpPastTheLimitEndsTheSession(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, Timeout: 2 * time.Second})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	res, err := d.Run(t.Context(), supervisor.Job{ID: "s1", Code: slowCleanup("import time; time.sleep(0.5)")}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("first call: %v %+v", err, res)
	}
	// Its clean-up is over well within this; the idle that ends it is no
	// sign of a broken worker to the sessions' look at it between calls.
	time.Sleep(2 * time.Second)
	if why := d.Lost(); why != "" {
		t.Fatalf("between calls, after the clean-up: lost (%s)", why)
	}
	if res, err = d.Run(t.Context(), supervisor.Job{ID: "s2", Code: "s = Slow()\ns.me = s\ndel s\n'kept'"}, nil); err != nil || res.Value != `"kept"` {
		t.Fatalf("second call, after a clean-up of 0.5 s: %v %+v", err, res)
	}
	if res, err = d.Run(t.Context(), supervisor.Job{ID: "s3", Code: slowCleanup("while True: pass")}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("third call: %v %+v", err, res)
	}
	_, err = d.Run(t.Context(), supervisor.Job{ID: "s4", Code: "1"}, nil)
	if !errors.Is(err, supervisor.ErrWorkerLost) || !strings.Contains(err.Error(), "did not clean up") {
		t.Fatalf("call after a spinning clean-up: %v, want ErrWorkerLost saying the clean-up did not end", err)
	}
}

// A worker whose idle carries recycle (the R worker, when it could not set
// R back after a stateless call) takes no other call: the next goes to a
// fresh worker, and the restart is counted as a recycle.
func TestIdleWithRecycleRetiresTheWorker(t *testing.T) {
	p := fakePool(t, "recycle-on-idle", supervisor.Config{Workers: 1, Timeout: 10 * time.Second})
	first := run(t, p, supervisor.Job{Code: "1"})
	second := run(t, p, supervisor.Job{Code: "1"})
	if first.Status != supervisor.StatusSuccess || second.Status != supervisor.StatusSuccess {
		t.Fatalf("calls: %s (%s), %s (%s), want both success", first.Status, first.Error, second.Status, second.Error)
	}
	if first.Worker == second.Worker {
		t.Fatalf("both calls ran on %s; want the second on a fresh worker", first.Worker)
	}
	if n := p.Stats().Counts.Restarts[supervisor.RestartRecycle]; n < 1 {
		t.Errorf("restarts %v, want a recycle", p.Stats().Counts.Restarts)
	}
}

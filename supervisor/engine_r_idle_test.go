package supervisor_test

import (
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// An R session's worker idles between its calls without being judged for
// V8's work on it: tiering webR's R.wasm up after the worker is ready
// (some 14 s of a CPU, longer under load) is the engine's, not code the
// call left running. Before, a dedicated worker had no ready time, so its
// start-up work was judged at once: a new R session was lost 10 s after
// its first call, "its code kept using CPU between calls".
func TestRSessionOutlivesItsWorkersStartupWork(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 1, Timeout: 60 * time.Second})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "x <- 1:10", Language: "r"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("first call: %v %+v", err, res)
	}
	// Idle past two of the windows a session's worker is judged over.
	time.Sleep(2*supervisor.SessionIdleWindow + 5*time.Second)
	if why := d.Lost(); why != "" {
		t.Fatalf("the idle R session's worker was lost: %s", why)
	}
	res, err := d.Run(t.Context(), supervisor.Job{ID: "2", Code: "sum(x)", Language: "r"}, nil)
	if err != nil || res.Value != "55" {
		t.Fatalf("call after idling: %v %+v", err, res)
	}
}

// What a fresh R worker uses while idle is V8's threads' (EngineCPU):
// those that run code (R's thread, the main one) use next to none.
func TestRWorkerIdlesOnlyInV8sThreads(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 1, Timeout: 60 * time.Second})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pid := d.PID()
	total, engine := supervisor.ProcessCPU(t, pid), supervisor.EngineCPU(t, pid)
	time.Sleep(5 * time.Second)
	total, engine = supervisor.ProcessCPU(t, pid)-total, supervisor.EngineCPU(t, pid)-engine
	t.Logf("5 s idle after ready: %v of CPU, %v of it V8's threads'", total, engine)
	if engine < 200*time.Millisecond {
		t.Errorf("V8's threads used %v in 5 s after ready; want its compile of R.wasm, at least 200ms", engine)
	}
	if code := total - engine; code > 150*time.Millisecond {
		t.Errorf("the threads that run code used %v in 5 s idle, want next to none", code)
	}
}

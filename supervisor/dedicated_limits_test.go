package supervisor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// A Dedicated worker (a Python session's) is held to the memory ceiling
// and the thread limit as the pool's workers are: a session's code that
// grows its process past them loses its worker, not the machine's memory
// or tasks. The fake tests show the watch; the real ones, code that goes
// around the heap cap.

func TestMemoryCeilingKillsARunningDedicatedWorker(t *testing.T) {
	limit := int64(64 << 20)
	mib := supervisor.MemoryCeiling(limit)>>20 + 64
	p := fakePool(t, "balloon", supervisor.Config{Workers: 1, MemoryLimit: limit}, fmt.Sprintf("PYRUN_FAKE_MIB=%d", mib))
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "balloon", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "the call", time.Since(start), 0, 10*time.Second)
	if res.Status != supervisor.StatusMemoryError || res.Stdout != "allocating\n" || !strings.Contains(res.Error, "memory limit") {
		t.Errorf("status %s stdout %q error %q; want memory-error with the output so far", res.Status, res.Stdout, res.Error)
	}
	if d.Lost() == "" {
		t.Error("the worker killed for memory is not lost")
	}
}

func TestMemoryCeilingKillsAnIdleDedicatedWorker(t *testing.T) {
	limit := int64(64 << 20)
	mib := supervisor.MemoryCeiling(limit)>>20 + 64
	p := fakePool(t, "balloon", supervisor.Config{Workers: 1, MemoryLimit: limit}, fmt.Sprintf("PYRUN_FAKE_MIB=%d", mib))
	exited := make(chan struct{})
	d, err := p.StartDedicated(t.Context(), func() { close(exited) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "balloon-later", Timeout: time.Minute}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the idle worker grown past its ceiling was not killed")
	}
	if d.Lost() == "" {
		t.Error("the worker killed for memory is not lost")
	}
	// The pool's own worker is untouched.
	if res, err := p.Run(t.Context(), supervisor.Job{ID: "2", Code: "small"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Errorf("a pool call after the kill: %v %+v", err, res)
	}
}

// Real workers: JavaScript buffers are outside Python's heap cap, and
// JavaScript threads outside both; in a session as in a stateless call
// the worker is killed and the call ends with memory-error.
func TestHostileMemoryInADedicatedWorker(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, MemoryLimit: 256 << 20})
	for _, tc := range []struct{ name, code string }{
		{"JavaScript buffers", "print('allocating')\nimport js\nx = [js.Uint8Array.new(32 * 2**20).fill(1) for _ in range(64)]\nimport time\ntime.sleep(5)"},
		{"JavaScript threads", "print('allocating')\nfrom pyodide.code import run_js\nrun_js(\"for (let i = 0; i < 2000; i++) new Worker('data:text/javascript,globalThis.x = new Uint8Array(8 << 20).fill(1); setInterval(() => {}, 1000)', {type: 'module'})\")\nimport time\ntime.sleep(5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.StartDedicated(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "x = 41", Timeout: 30 * time.Second}, nil); err != nil || res.Status != supervisor.StatusSuccess {
				t.Fatalf("a first call: %v %+v", err, res)
			}
			res, err := d.Run(t.Context(), supervisor.Job{ID: "2", Code: tc.code, Timeout: 30 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", res.Status, clipString(res.Error, 300))
			if res.Status != supervisor.StatusMemoryError || res.Stdout != "allocating\n" {
				t.Errorf("status %s stdout %q, want memory-error after the output; error:\n%s", res.Status, res.Stdout, clipString(res.Error, 2000))
			}
			if d.Lost() == "" {
				t.Error("the session's worker killed for memory is not lost")
			}
		})
	}
}

package supervisor_test

import (
	"errors"
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

// A Dedicated worker (a session's) that keeps using CPU between its calls
// (a task or timer its code left running) is killed once a whole
// SessionIdleWindow of its idle spell was over the idle CPU limit, and says
// why; one busy only during its calls is not.
func TestIdleCPUKillsADedicatedWorker(t *testing.T) {
	p := fakePool(t, "spin", supervisor.Config{Workers: 1, IdleCPU: 0.1})
	quiet, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	exited := make(chan struct{})
	d, err := p.StartDedicated(t.Context(), func() { close(exited) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "spin-after"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	start := time.Now()
	// Meanwhile the other one runs calls that use the CPU: theirs to use.
	stop := make(chan struct{})
	busy := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				busy <- nil
				return
			default:
			}
			if res, err := quiet.Run(t.Context(), supervisor.Job{ID: fmt.Sprint("q", i), Code: "spin:300ms"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
				busy <- fmt.Errorf("%v %+v", err, res)
				return
			}
		}
	}()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the dedicated worker burning CPU between calls was not killed")
	}
	close(stop)
	if err := <-busy; err != nil {
		t.Errorf("the busy dedicated worker's calls: %v", err)
	}
	within(t, "noticing the burn", time.Since(start), supervisor.SessionIdleWindow, supervisor.SessionIdleWindow+20*time.Second)
	if why := d.Lost(); !strings.HasPrefix(why, supervisor.LostIdleCPU) || !strings.Contains(why, "--idle-cpu allows 10%") {
		t.Errorf("lost for %q, want %q and the figures", why, supervisor.LostIdleCPU)
	}
	if _, err := d.Run(t.Context(), supervisor.Job{ID: "2", Code: "x"}, nil); !errors.Is(err, supervisor.ErrWorkerLost) ||
		!strings.Contains(err.Error(), supervisor.LostIdleCPU) {
		t.Errorf("a call after the kill: %v", err)
	}
	if why := quiet.Lost(); why != "" {
		t.Errorf("the worker busy only in its calls was lost: %s", why)
	}
}

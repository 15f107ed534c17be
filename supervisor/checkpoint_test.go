package supervisor_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// A session's worker takes a checkpoint between calls, and a new worker
// started from it has the session's values, modules, files (an open file
// object included) and working directory, and its clock goes on.
func TestCheckpointRestoresASessionsState(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, Checkpoints: true})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	setup := "import os, json, time, random\n" +
		"class Box:\n    def __init__(self, v): self.v = v\n" +
		"b = Box(41)\nrows = list(range(1000))\n" +
		"os.makedirs('data', exist_ok=True)\nopen('data/f.txt', 'w').write('kept')\n" +
		"log = open('log.txt', 'w')\nlog.write('one ')\nlog.flush()\n" +
		"from js import Date\nd = Date.new(0)\nt0 = time.monotonic()\n'ok'"
	res, err := d.Run(t.Context(), supervisor.Job{ID: "c1", Code: setup}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("first call: %v %+v", err, res)
	}
	img := checkpointOf(t, d)
	if img.Mem < 30<<20 || img.FS == 0 {
		t.Fatalf("checkpoint of %d + %d bytes", img.Mem, img.FS)
	}
	// The worker goes on after its checkpoint.
	if res, err = d.Run(t.Context(), supervisor.Job{ID: "c2", Code: "b.v += 1\nb.v"}, nil); err != nil || res.Value != "42" {
		t.Fatalf("call after the checkpoint: %v %+v", err, res)
	}
	d.Kill("test")

	// The checkpoint parked a restore (parked.go): the restore is that
	// process's, and another is parked for the next.
	supervisor.WaitUntil(t, func() bool { return p.Stats().Parked == 1 })
	r, err := p.StartRestored(t.Context(), img, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if n := p.Stats().Counts.Restores; n["parked"] != 1 || n["started"] != 0 {
		t.Errorf("restores by what onto: %v, want one onto a parked worker", n)
	}
	supervisor.WaitUntil(t, func() bool { return p.Stats().Parked == 1 })
	check := "log.write('two')\nlog.close()\n" +
		"[b.v, len(rows), open('data/f.txt').read(), open('log.txt').read(), os.getcwd(), time.monotonic() >= t0, type(b).__name__]"
	res, err = r.Run(t.Context(), supervisor.Job{ID: "r1", Code: check}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("restored call: %v %+v", err, res)
	}
	want := `[41, 1000, "kept", "one two", "/home/pyodide", true, "Box"]`
	if got := compactJSON(t, res.Value); got != want {
		t.Errorf("restored state %s, want %s", got, want)
	}
	// A JavaScript object did not survive, and says so.
	res, err = r.Run(t.Context(), supervisor.Job{ID: "r2", Code: "d.getTime()"}, nil)
	if err != nil || res.Status == supervisor.StatusSuccess || !strings.Contains(res.Error, "did not survive") {
		t.Errorf("a JS object after the restore: %v %+v", err, res)
	}
	// A restored worker takes checkpoints of its own.
	if err := r.Checkpoint(t.Context(), func(*supervisor.Image) error { return nil }); err != nil {
		t.Errorf("checkpoint of a restored worker: %v", err)
	}
	// A parked worker killed from outside while it waits costs no restore:
	// the restore starts a worker of its own from the same checkpoint.
	for _, pid := range p.ParkedPIDs() {
		if proc, err := os.FindProcess(pid); err == nil {
			_ = proc.Kill()
		}
	}
	img2 := checkpointOf(t, r)
	r2, err := p.StartRestored(t.Context(), img2, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("a restore after its parked worker was killed: %v", err)
	}
	t.Cleanup(r2.Close)
	if res, err = r2.Run(t.Context(), supervisor.Job{ID: "r3", Code: "b.v"}, nil); err != nil || res.Value != "41" {
		t.Errorf("the second restore: %v %+v", err, res)
	}
	if n := p.Stats().Counts.Restores; n["parked"]+n["started"] != 2 {
		t.Errorf("restores by what onto: %v, want two in all", n)
	}
}

// A parked restore warms its compiled code from the base snapshot before
// it parks (pyodide-host/worker.ts, warmElsewhere), in a Worker it ends
// after: the parked process stays small (160-170 MiB measured, its heap's
// pages mapped ahead; some 80 MiB more when the throwaway Pyodide ran on
// the parked worker's own thread, which held on to it), and a session
// restored onto it has its state.
func TestParkedRestoreIsWarmedAndStaysSmall(t *testing.T) {
	const maxRSS = 200 << 20
	var logs syncbuf.Buffer
	p, err := supervisor.NewPool(testruntime.Get(t), supervisor.Config{Workers: 1, Checkpoints: true},
		hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs}))
	if err != nil {
		t.Fatal(err)
	}
	supervisor.CloseAtEnd(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pool log:\n%s", logs.String())
		}
	})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "c1", Code: "rows = list(range(1000))"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("first call: %v %+v", err, res)
	}
	img := checkpointOf(t, d)
	d.Kill("test")
	// Warming takes the parked worker a few seconds of CPU, more on a loaded machine.
	deadline := time.Now().Add(2 * time.Minute)
	for p.Stats().Parked < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no restore parked within 2 minutes: %+v", p.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "parked restore warmed from the base snapshot") {
		t.Errorf("the parked worker did not warm its code from the base snapshot")
	}
	pids := p.ParkedPIDs()
	if len(pids) != 1 {
		t.Fatalf("parked pids %v, want one", pids)
	}
	// The warming Worker's memory goes back to the system as its thread ends.
	var rss int64
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rss = statusBytes(t, pids[0], "VmRSS"); rss <= maxRSS || time.Now().After(end) {
			break
		}
	}
	t.Logf("parked worker RSS %d MiB", rss>>20)
	if rss > maxRSS {
		t.Errorf("a parked worker holds %d MiB, want at most %d MiB", rss>>20, maxRSS>>20)
	}
	r, err := p.StartRestored(t.Context(), img, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if n := p.Stats().Counts.Restores; n["parked"] != 1 {
		t.Errorf("restores by what onto: %v, want one onto a parked worker", n)
	}
	if res, err := r.Run(t.Context(), supervisor.Job{ID: "r1", Code: "len(rows)"}, nil); err != nil || res.Value != "1000" {
		t.Errorf("restored call: %v %+v", err, res)
	}
}

// Native code (ctypes) makes a session's state impossible to restore
// safely: the worker refuses the checkpoint and says why.
func TestCheckpointRefusesNativeCode(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, Checkpoints: true})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	res, err := d.Run(t.Context(), supervisor.Job{ID: "c1", Code: "import ctypes\ncb = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)\ncb()"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("call: %v %+v", err, res)
	}
	err = d.Checkpoint(t.Context(), func(*supervisor.Image) error {
		t.Error("a refused checkpoint was given")
		return nil
	})
	if !errors.Is(err, supervisor.ErrNotDurable) || !strings.Contains(err.Error(), "native code") {
		t.Fatalf("checkpoint after ctypes: %v, want ErrNotDurable naming native code", err)
	}
	if why := d.Lost(); why != "" {
		t.Fatalf("the worker is lost after a refused checkpoint: %s", why)
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return strings.ReplaceAll(b.String(), ",", ", ")
}

// statusBytes is a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func statusBytes(t *testing.T, pid int, field string) int64 {
	t.Helper()
	kib, err := strconv.ParseInt(strings.TrimSuffix(procStatus(t, pid)[field], " kB"), 10, 64)
	if err != nil {
		t.Fatalf("%s of /proc/%d/status: %v", field, pid, err)
	}
	return kib << 10
}

// A checkpoint costs the worker no copy of its heap: before, Pyodide's
// memory snapshot copied it whole, and a session within its memory limit
// was killed by its own checkpoint, its state lost (issue 36).
func TestCheckpointDoesNotCopyTheWorkersHeap(t *testing.T) {
	const state = 96 << 20
	p := realPool(t, supervisor.Config{Workers: 1, Checkpoints: true, MemoryLimit: 256 << 20})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	setup := fmt.Sprintf("import os\nx = bytearray(%d)\nfor i in range(0, len(x), 1 << 20): x[i:i + (1 << 20)] = os.urandom(1 << 20)\nlen(x)", state)
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "c1", Code: setup}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("setup: %v %+v", err, res)
	}
	pid := d.PID()
	// VmHWM from here on: the worker's peak during its checkpoint.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	before := statusBytes(t, pid, "VmRSS")
	if img := checkpointOf(t, d); img.Mem < state || img.FS == 0 {
		t.Fatalf("checkpoint of %d + %d bytes", img.Mem, img.FS)
	}
	grew := statusBytes(t, pid, "VmHWM") - before
	t.Logf("worker RSS %d MiB before its checkpoint, peak %d MiB more during it", before>>20, grew>>20)
	if grew > 32<<20 {
		t.Errorf("the worker's peak memory grew by %d MiB during its checkpoint of a %d MiB state, want at most 32 MiB", grew>>20, state>>20)
	}
	// Its health checks see it within its limits, and it goes on.
	time.Sleep(3 * supervisor.HealthInterval)
	if why := d.Lost(); why != "" {
		t.Fatalf("the worker was lost after its checkpoint: %s", why)
	}
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "c2", Code: "len(x)"}, nil); err != nil || res.Value != fmt.Sprint(state) {
		t.Fatalf("call after the checkpoint: %v %+v", err, res)
	}
}

// checkpointOf takes a checkpoint of d and returns it, read whole.
func checkpointOf(t *testing.T, d *supervisor.Dedicated) *supervisor.Image {
	t.Helper()
	var img supervisor.Image
	err := d.Checkpoint(t.Context(), func(from *supervisor.Image) error {
		b, err := io.ReadAll(from.R)
		if err == nil && int64(len(b)) != from.Mem+from.FS {
			err = fmt.Errorf("%d bytes, not %d + %d", len(b), from.Mem, from.FS)
		}
		img = *from
		img.R = bytes.NewReader(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return &img
}

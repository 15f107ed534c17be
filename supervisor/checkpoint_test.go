package supervisor_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
	img, err := d.Checkpoint(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Mem) < 30<<20 || len(img.Files) == 0 {
		t.Fatalf("checkpoint of %d + %d bytes", len(img.Mem), len(img.Files))
	}
	// The worker goes on after its checkpoint.
	if res, err = d.Run(t.Context(), supervisor.Job{ID: "c2", Code: "b.v += 1\nb.v"}, nil); err != nil || res.Value != "42" {
		t.Fatalf("call after the checkpoint: %v %+v", err, res)
	}
	d.Kill("test")

	r, err := p.StartRestored(t.Context(), img, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
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
	if _, err := r.Checkpoint(t.Context()); err != nil {
		t.Errorf("checkpoint of a restored worker: %v", err)
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
	_, err = d.Checkpoint(t.Context())
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

package checkpoint_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// realPool is a pool of real workers that take checkpoints.
func realPool(t *testing.T, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	cfg.Checkpoints = true
	p, err := supervisor.NewPool(testruntime.Get(t), cfg, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// dirKeeper is a Keeper of p's checkpoints in a dir store of its own,
// holding session id's lease for ten minutes: nothing renews it in these
// tests, and a checkpoint under -race on a loaded machine took over the
// default 10 s.
func dirKeeper(t *testing.T, p *supervisor.Pool, id string) *checkpoint.Keeper {
	t.Helper()
	dir := t.TempDir()
	store, err := checkpoint.OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	k, err := checkpoint.NewKeeper(store, []byte(strings.Repeat("k", checkpoint.MinKeyLen)), p, filepath.Join(dir, ".restore"), 0, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	k.SetLeases(checkpoint.Holder("box"), 10*time.Minute)
	if err := k.Hold(t.Context(), id, ""); err != nil {
		t.Fatal(err)
	}
	return k
}

// startFromLatest starts a worker of p from session id's latest intact
// checkpoint in k, closed at t's end.
func startFromLatest(t *testing.T, p *supervisor.Pool, k *checkpoint.Keeper, id string) *supervisor.Dedicated {
	t.Helper()
	_, img, err := k.Load(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.StartRestored(t.Context(), img, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// allocated is how many bytes the Go heap has allocated so far.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A checkpoint is encoded as it comes from the worker, in bounded chunks:
// pyrun allocates no copy of the session's state for it. Before, it read
// the whole state, copied it to compress it and held the compressed record
// too (a 150 MiB session: pyrun 372 -> 1016 MiB, past its Go memory limit;
// issue 36).
func TestCheckpointIsEncodedInBoundedMemory(t *testing.T) {
	const state = 96 << 20
	p := realPool(t, supervisor.Config{Workers: 1, MemoryLimit: 512 << 20, RestoreSpares: -1})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	// Random bytes: the record is as large as the state.
	setup := fmt.Sprintf("import os\nx = bytearray(%d)\nfor i in range(0, len(x), 1 << 20): x[i:i + (1 << 20)] = os.urandom(1 << 20)\nlen(x)", state)
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "c1", Code: setup}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("setup: %v %+v", err, res)
	}
	const id = "box.1"
	k := dirKeeper(t, p, id)
	_ = p.BaseSnapshot(t.Context()) // mapped once, before the count
	runtime.GC()
	before := allocated()
	if err := k.Take(t.Context(), d, []sessions.Saved{{ID: id, AfterCall: 1}}); err != nil {
		t.Fatal(err)
	}
	grew := allocated() - before
	last := k.Last()
	t.Logf("checkpoint of %d MiB raw, %d MiB stored: %d MiB allocated", last.Raw>>20, last.Stored>>20, grew>>20)
	if last.Raw < state || last.Stored < state {
		t.Fatalf("checkpoint of %d raw, %d stored bytes, want at least %d each", last.Raw, last.Stored, state)
	}
	if bound := uint64(16 << 20); grew > bound {
		t.Errorf("a checkpoint of a %d MiB state allocated %d MiB of Go heap, want at most %d MiB", state>>20, grew>>20, bound>>20)
	}
	// The record is the session's state. It is read from the store's file
	// and decoded as the restore reads it: pyrun holds some MiB, not the
	// record nor the state (before: both, 2.4 times the record).
	runtime.GC()
	before = allocated()
	r := startFromLatest(t, p, k, id)
	grew = allocated() - before
	t.Logf("restore of a %d MiB record: %d MiB allocated", last.Stored>>20, grew>>20)
	if bound := uint64(16 << 20); grew > bound {
		t.Errorf("a restore of a %d MiB record allocated %d MiB of Go heap, want at most %d MiB", last.Stored>>20, grew>>20, bound>>20)
	}
	// None parked (RestoreSpares -1): the restore started its own worker.
	if n := p.Stats().Counts.Restores; n["started"] != 1 || n["parked"] != 0 || p.Stats().Parked != 0 {
		t.Errorf("restores by what onto: %v (%d parked), want one onto a worker started for it", n, p.Stats().Parked)
	}
	check := "import hashlib\nhashlib.sha256(x).hexdigest()"
	want, err := d.Run(t.Context(), supervisor.Job{ID: "c2", Code: check}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Run(t.Context(), supervisor.Job{ID: "r1", Code: check}, nil)
	if err != nil || got.Status != supervisor.StatusSuccess || got.Value != want.Value {
		t.Fatalf("restored: %v %+v, want %s", err, got, want.Value)
	}
}

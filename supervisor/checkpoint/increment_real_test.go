package checkpoint_test

import (
	"maps"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// A real worker's checkpoint after a small call is an increment: the
// worker sends the heap's chunks that changed, most frames are copied from
// the record before, and the record restores to the state after the call.
// A fork between (a checkpoint not kept) leaves the next an increment.
func TestASmallCallsCheckpointIsAnIncrement(t *testing.T) {
	p, d, k := incSession(t, -1)
	run := func(w sessions.Worker, code string) string { return runIn(t, w, code) }
	take := func(call int) checkpoint.Sizes { return takeAfter(t, k, d, call) }
	if l := take(1); l.Reused != 0 || l.Frames < 30 {
		t.Fatalf("the first checkpoint: %d of %d frames reused, want none", l.Reused, l.Frames)
	}
	run(d, "rows.append(1)")
	if l := take(2); l.Reused < l.Frames/2 {
		t.Errorf("after a small call: %d of %d frames reused, want at least half", l.Reused, l.Frames)
	}
	f, err := k.Fork(t.Context(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	run(d, "rows.append(2)")
	if l := take(3); l.Reused < l.Frames/2 {
		t.Errorf("after a fork and a small call: %d of %d frames reused, want at least half", l.Reused, l.Frames)
	}
	check := "import hashlib\nhashlib.sha256(x).hexdigest() + repr(rows)"
	want := run(d, check)
	if got := run(startFromLatest(t, p, k, incID), check); got != want {
		t.Fatalf("restored: %s, want %s", got, want)
	}
}

// A restored worker's first checkpoint is an increment to the record it
// was restored from, onto a parked restore or a worker started for it:
// pyrun sums the restored heap for the worker, which sends only the chunks
// that changed since; the record restores to the state after the call.
func TestTheFirstCheckpointAfterARestoreIsAnIncrement(t *testing.T) {
	for _, parked := range []bool{false, true} {
		t.Run(map[bool]string{false: "started", true: "parked"}[parked], func(t *testing.T) {
			spares := -1
			if parked {
				spares = 1
			}
			p, d, k := incSession(t, spares)
			run := func(w sessions.Worker, code string) string { return runIn(t, w, code) }
			take := func(w sessions.Worker, call int) checkpoint.Sizes { return takeAfter(t, k, w, call) }
			take(d, 1)
			d.Close()
			restore := func() sessions.Worker {
				t.Helper()
				if parked {
					// The parked restore starts after the first checkpoint.
					for p.Stats().Parked == 0 {
						select {
						case <-t.Context().Done():
							t.Fatal("no parked restore")
						case <-time.After(50 * time.Millisecond):
						}
					}
				}
				before := maps.Clone(p.Stats().Counts.Restores)
				r, _, err := k.Restore(t.Context(), incID, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(r.Close)
				onto := map[bool]string{false: "started", true: "parked"}[parked]
				if got := p.Stats().Counts.Restores[onto]; got != before[onto]+1 {
					t.Errorf("restores onto %s: %d, want %d", onto, got, before[onto]+1)
				}
				return r
			}
			r := restore()
			run(r, "rows.append(1)")
			if l := take(r, 2); l.Reused < l.Frames/2 {
				t.Errorf("the restored worker's first checkpoint: %d of %d frames reused, want at least half", l.Reused, l.Frames)
			}
			check := "import hashlib\nhashlib.sha256(x).hexdigest() + repr(rows)"
			want := run(r, check)
			r.Close()
			if got := run(restore(), check); got != want {
				t.Fatalf("restored from the increment: %s, want %s", got, want)
			}
		})
	}
}

// runIn runs code on w, a session's worker, and is its value; a call that
// does not succeed fails t.
func runIn(t *testing.T, w sessions.Worker, code string) string {
	t.Helper()
	res, err := w.Run(t.Context(), supervisor.Job{ID: "j" + time.Now().Format("150405.000000"), Code: code}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("%q: %v %+v", code, err, res)
	}
	return res.Value
}

// incID is the session the increments' tests keep checkpoints of.
const incID = "box.1"

// incSession is a real pool that keeps spares parked restores, a session's
// worker on it holding 8 MiB of random bytes (x) and a list (rows), and a
// Keeper of session incID's checkpoints.
func incSession(t *testing.T, spares int) (*supervisor.Pool, *supervisor.Dedicated, *checkpoint.Keeper) {
	t.Helper()
	p := realPool(t, supervisor.Config{Workers: 1, RestoreSpares: spares})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	runIn(t, d, "import os\nx = os.urandom(8 << 20)\nrows = []")
	return p, d, dirKeeper(t, p, incID)
}

// takeAfter takes a checkpoint of w as session incID's after call, and is
// its figures.
func takeAfter(t *testing.T, k *checkpoint.Keeper, w sessions.Worker, call int) checkpoint.Sizes {
	t.Helper()
	if err := k.Take(t.Context(), w, []sessions.Saved{{ID: incID, AfterCall: call}}); err != nil {
		t.Fatal(err)
	}
	l := k.Last()
	t.Logf("checkpoint after call %d: %d MiB raw, %d KiB stored, %d of %d frames reused, in %s (worker %s, encode %s, store %s)",
		call, l.Raw>>20, l.Stored>>10, l.Reused, l.Frames, l.Took.Round(time.Millisecond), l.Worker.Round(time.Millisecond),
		l.Encode.Round(time.Millisecond), l.Store.Round(time.Millisecond))
	return l
}

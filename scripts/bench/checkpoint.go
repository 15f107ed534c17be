//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// checkpointReport: durable sessions (docs/sessions.md). Back-to-back calls
// of one session with checkpoints off and on (the default delay, 2s: calls
// back to back defer the checkpoint, so what they pay is the worker's boot
// with _makeSnapshot); the time of a call whose worker dies, which includes the restore
// from the checkpoint; and checkpoints' sizes for a small and a 50 MB
// session.
type checkpointReport struct {
	Calls    int              `json:"calls"`
	OffMS    float64          `json:"off_median_ms"`
	OnMS     float64          `json:"on_median_ms"`
	OnRatio  float64          `json:"on_over_off"`
	Sizes    []checkpointSize `json:"sizes"`
	Restores *restoreReport   `json:"restores"`
}

// restoreReport: a small session's lost call with its restore, and a fork of
// it, onto parked restores (--restore-spares 1, the default) and onto
// workers started for them (--restore-spares 0), interleaved; medians.
type restoreReport struct {
	Runs          int     `json:"runs"`
	ParkedMS      float64 `json:"lost_call_parked_median_ms"`
	StartedMS     float64 `json:"lost_call_started_median_ms"`
	Ratio         float64 `json:"parked_over_started"`
	ForkParkedMS  float64 `json:"fork_parked_median_ms"`
	ForkStartedMS float64 `json:"fork_started_median_ms"`
}

type checkpointSize struct {
	What      string  `json:"what"`
	RawMiB    float64 `json:"raw_mib"`
	StoredMiB float64 `json:"stored_mib"`
	TakeMS    float64 `json:"take_ms"`
	// RestoreMS is the call whose worker died: the crash, a worker's start
	// from the checkpoint, and the call's report; NextMS the call after it;
	// medians of RestoreRuns.
	RestoreRuns int     `json:"restore_runs"`
	RestoreMS   float64 `json:"lost_call_with_restore_ms"`
	NextMS      float64 `json:"next_call_ms"`
	// Again: the checkpoints after a small call (rows.append(1)) that
	// follows the first, medians of AgainRuns: in all, and the worker's
	// part (until its bytes come), the encoding's and the store's.
	AgainRuns     int     `json:"again_runs"`
	AgainMS       float64 `json:"again_median_ms"`
	AgainWorkerMS float64 `json:"again_worker_median_ms"`
	AgainEncodeMS float64 `json:"again_encode_median_ms"`
	AgainStoreMS  float64 `json:"again_store_median_ms"`
	// AfterRestore: the checkpoint after the next call, the restored
	// worker's first: in all (median of RestoreRuns), and its frames
	// copied from the record restored (an increment to it) of all, the
	// last run's.
	AfterRestoreMS     float64 `json:"after_restore_ms"`
	AfterRestoreReused int     `json:"after_restore_reused_frames"`
	AfterRestoreFrames int     `json:"after_restore_frames"`
}

// againRuns is how many checkpoints after a small call checkpointSizes
// times.
const againRuns = 7

// restoreRuns is how many lost calls with their restores checkpointSizes
// times, each with the restored worker's first checkpoint.
const restoreRuns = 5

const checkpointCode = "rows.append(sum(range(1000)))\nlen(rows)"

func benchCheckpoint(ctx context.Context, rt *supervisor.Runtime, calls int) (*checkpointReport, error) {
	rep := &checkpointReport{Calls: calls}
	off, on, err := sessionCalls(ctx, rt, calls)
	if err != nil {
		return nil, err
	}
	rep.OffMS, rep.OnMS = round3(ms(median(off))), round3(ms(median(on)))
	rep.OnRatio = round2(float64(median(on)) / float64(median(off)))
	progress("checkpoint: %d back-to-back session calls: off %.3f ms, on %.3f ms (%.2fx)", calls, rep.OffMS, rep.OnMS, rep.OnRatio)
	for _, c := range []struct{ what, setup string }{
		{"small session (a list of 1000 ints)", "rows = list(range(1000))"},
		{"50 MB session (bytes, 40 MB compressible, 10 MB random; a 1 MB file)", "import os\nrows = [bytes(1 << 20) for _ in range(40)] + [os.urandom(1 << 20) for _ in range(10)]\nopen('data.bin', 'wb').write(os.urandom(1 << 20))"},
	} {
		sz, err := checkpointSizes(ctx, rt, c.what, c.setup)
		if err != nil {
			return nil, err
		}
		progress("checkpoint: %s: %.1f MiB raw, %.2f MiB stored, taken in %.0f ms; after a small call, median of %d: %.0f ms (worker %.0f, encode %.0f, store %.0f); the lost call with its restore %.0f ms, the next call %.1f ms, the checkpoint after it %.0f ms (%d of %d frames copied)",
			sz.What, sz.RawMiB, sz.StoredMiB, sz.TakeMS, sz.AgainRuns, sz.AgainMS, sz.AgainWorkerMS, sz.AgainEncodeMS, sz.AgainStoreMS, sz.RestoreMS, sz.NextMS,
			sz.AfterRestoreMS, sz.AfterRestoreReused, sz.AfterRestoreFrames)
		rep.Sizes = append(rep.Sizes, sz)
	}
	rr, err := restoreTimes(ctx, rt, 7)
	if err != nil {
		return nil, err
	}
	rep.Restores = rr
	progress("checkpoint: restores of a small session, medians of %d: a lost call %.0f ms parked, %.0f ms started (%.2fx); a fork %.0f ms parked, %.0f ms started",
		rr.Runs, rr.ParkedMS, rr.StartedMS, rr.Ratio, rr.ForkParkedMS, rr.ForkStartedMS)
	return rep, nil
}

// restoreTimes times a small session's lost call (its worker killed in the
// call, the call's answer after the restore) and a fork of it, runs times
// each, alternating between a pool that parks restores and one that does
// not, so that other work on the machine weighs on both alike. Each run on
// the parking pool waits for its parked worker first: what it times is a
// restore onto one.
func restoreTimes(ctx context.Context, rt *supervisor.Runtime, runs int) (*restoreReport, error) {
	type side struct {
		m          *sessions.Manager
		pool       *supervisor.Pool
		id         string
		lost, fork []time.Duration
	}
	var sides [2]*side
	for i, spares := range []int{1, -1} {
		m, pool, _, done, err := checkpointSessionsOf(rt, "dir", 10*time.Millisecond, spares)
		if err != nil {
			return nil, err
		}
		defer done()
		res, err := sessionRun(ctx, m, sessions.NewSession, "rows = list(range(1000))")
		if err != nil {
			return nil, err
		}
		sides[i] = &side{m: m, pool: pool, id: res.SessionID}
	}
	wait := func(what string, cond func() bool) error {
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				return fmt.Errorf("restores: %s: not within 2 minutes", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	for range runs {
		for i, sd := range sides {
			if err := wait("a checkpoint", func() bool { return sd.m.Stats().Checkpoints > 0 }); err != nil {
				return nil, err
			}
			if i == 0 {
				if err := wait("a parked restore", func() bool { return sd.pool.Stats().Parked > 0 }); err != nil {
					return nil, err
				}
			}
			t := time.Now()
			res, err := sessionRun(ctx, sd.m, sd.id, "import js\njs.Deno.exit(3)")
			if err != nil {
				return nil, err
			}
			if res.Checkpoint == nil {
				return nil, fmt.Errorf("restores: the lost call was not restored: %s", res.Error)
			}
			sd.lost = append(sd.lost, time.Since(t))
			if i == 0 {
				if err := wait("a parked restore", func() bool { return sd.pool.Stats().Parked > 0 }); err != nil {
					return nil, err
				}
			}
			t = time.Now()
			res, err = sessionRun(ctx, sd.m, sessions.ForkPrefix+sd.id, "len(rows)")
			if err != nil {
				return nil, fmt.Errorf("restores: fork: %w", err)
			}
			sd.fork = append(sd.fork, time.Since(t))
			if _, err := sd.m.Run(ctx, sessions.Call{Session: res.SessionID, End: true}, nil); err != nil {
				return nil, fmt.Errorf("restores: end the fork: %w", err)
			}
		}
	}
	if n := sides[0].pool.Stats().Counts.Restores["started"]; n > 0 {
		return nil, fmt.Errorf("restores: %d restores of the parking pool started their own worker", n)
	}
	rr := &restoreReport{Runs: runs,
		ParkedMS: round1(ms(median(sides[0].lost))), StartedMS: round1(ms(median(sides[1].lost))),
		ForkParkedMS: round1(ms(median(sides[0].fork))), ForkStartedMS: round1(ms(median(sides[1].fork)))}
	rr.Ratio = round2(rr.ParkedMS / rr.StartedMS)
	return rr, nil
}

// checkpointSessions makes a pool of one worker and its sessions, with a dir:
// store ("dir") or none; it returns them, the keeper, and a clean-up.
func checkpointSessions(rt *supervisor.Runtime, store string, delay time.Duration) (*sessions.Manager, *checkpoint.Keeper, func(), error) {
	m, _, keeper, done, err := checkpointSessionsOf(rt, store, delay, 0)
	return m, keeper, done, err
}

// checkpointSessionsOf is checkpointSessions with the pool's RestoreSpares,
// and the pool.
func checkpointSessionsOf(rt *supervisor.Runtime, store string, delay time.Duration, restoreSpares int) (*sessions.Manager, *supervisor.Pool, *checkpoint.Keeper, func(), error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: os.Stderr})
	if os.Getenv("PYRUN_BENCH_DEBUG") != "" {
		log.SetLevel(hclog.Debug)
	}
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1, Checkpoints: store != "none", RestoreSpares: restoreSpares}, log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	dir, err := os.MkdirTemp("", "pyrun-bench-store-")
	if err != nil {
		pool.Close(context.Background())
		return nil, nil, nil, nil, err
	}
	var keeper *checkpoint.Keeper
	var cp sessions.Checkpointer
	var leases sessions.Leaser
	if store != "none" {
		st, err := checkpoint.OpenDir(dir, 0)
		var key []byte
		if err == nil {
			key, err = checkpoint.DirKey(dir)
		}
		if err == nil {
			keeper, err = checkpoint.NewKeeper(st, key, pool, filepath.Join(dir, ".restore"), 0, log)
		}
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, nil, nil, err
		}
		cp, leases = keeper, keeper
	}
	m := sessions.New(sessions.Options{Instance: "bench", Log: log, Limits: sessions.Limits{Spares: -1},
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		}, Checkpoints: cp, Leases: leases, CheckpointDelay: delay})
	return m, pool, keeper, func() {
		m.Close(context.Background())
		pool.Close(context.Background())
		os.RemoveAll(dir)
	}, nil
}

func sessionRun(ctx context.Context, m *sessions.Manager, id, code string) (supervisor.Result, error) {
	res, err := m.Run(ctx, sessions.Call{Session: id, Job: supervisor.Job{ID: fmt.Sprint(time.Now().UnixNano()), Code: code}}, nil)
	if err == nil && res.Status != supervisor.StatusSuccess && res.Checkpoint == nil {
		err = fmt.Errorf("%s: %s", res.Status, res.Error)
	}
	return res, err
}

// sessionCalls times back-to-back calls of a session with checkpoints off
// and of one with them on, in alternating batches of 10, so that other work
// on the machine weighs on both alike.
func sessionCalls(ctx context.Context, rt *supervisor.Runtime, calls int) (off, on []time.Duration, err error) {
	var ids [2]string
	var mgrs [2]*sessions.Manager
	for i, store := range []string{"none", "dir"} {
		m, _, done, err := checkpointSessions(rt, store, 0)
		if err != nil {
			return nil, nil, err
		}
		defer done()
		res, err := sessionRun(ctx, m, sessions.NewSession, "rows = []")
		if err != nil {
			return nil, nil, err
		}
		mgrs[i], ids[i] = m, res.SessionID
		for range 20 { // past the first calls' warm-up
			if _, err := sessionRun(ctx, m, ids[i], checkpointCode); err != nil {
				return nil, nil, err
			}
		}
	}
	var ds [2][]time.Duration
	for len(ds[1]) < calls {
		for i := range 2 {
			for range 10 {
				t := time.Now()
				if _, err := sessionRun(ctx, mgrs[i], ids[i], checkpointCode); err != nil {
					return nil, nil, err
				}
				ds[i] = append(ds[i], time.Since(t))
			}
		}
	}
	return ds[0], ds[1], nil
}

// checkpointSizes makes a session by setup, waits for its checkpoint, kills
// its worker in a call and times that call (with the restore) and the next.
func checkpointSizes(ctx context.Context, rt *supervisor.Runtime, what, setup string) (checkpointSize, error) {
	sz := checkpointSize{What: what}
	m, keeper, done, err := checkpointSessions(rt, "dir", 10*time.Millisecond)
	if err != nil {
		return sz, err
	}
	defer done()
	res, err := sessionRun(ctx, m, sessions.NewSession, setup)
	if err != nil {
		return sz, err
	}
	id := res.SessionID
	deadline := time.Now().Add(2 * time.Minute)
	for m.Stats().Checkpoints < 1 {
		if time.Now().After(deadline) {
			return sz, fmt.Errorf("%s: no checkpoint in 2 minutes", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := keeper.Last()
	sz.RawMiB, sz.StoredMiB = round1(float64(last.Raw)/(1<<20)), round2(float64(last.Stored)/(1<<20))
	sz.TakeMS = round1(ms(last.Took))
	// The checkpoints after a small call: the session's state barely
	// changed since the one before.
	var took, worker, encode, store []time.Duration
	for i := range againRuns {
		if _, err := sessionRun(ctx, m, id, "rows.append(1)"); err != nil {
			return sz, err
		}
		for m.Stats().Checkpoints < int64(2+i) {
			if time.Now().After(deadline) {
				return sz, fmt.Errorf("%s: checkpoints after a small call: not within 2 minutes", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		l := keeper.Last()
		took, worker, encode, store = append(took, l.Took), append(worker, l.Worker), append(encode, l.Encode), append(store, l.Store)
	}
	sz.AgainRuns = againRuns
	sz.AgainMS, sz.AgainWorkerMS = round1(ms(median(took))), round1(ms(median(worker)))
	sz.AgainEncodeMS, sz.AgainStoreMS = round1(ms(median(encode))), round1(ms(median(store)))
	// The lost calls, each with its restore, the call after and the
	// restored worker's first checkpoint, restoreRuns times.
	var lost, next, after []time.Duration
	for range restoreRuns {
		t := time.Now()
		res, err = sessionRun(ctx, m, id, "import js\njs.Deno.exit(3)")
		if err != nil {
			return sz, err
		}
		if res.Checkpoint == nil {
			return sz, fmt.Errorf("%s: the lost call was not restored: %s", what, res.Error)
		}
		lost = append(lost, time.Since(t))
		// The restored worker's first checkpoint is the first counted
		// from here (after the lost call, if it makes the session's state
		// new, else after the next).
		before := m.Stats().Checkpoints
		t = time.Now()
		if _, err := sessionRun(ctx, m, id, "len(rows)"); err != nil {
			return sz, err
		}
		next = append(next, time.Since(t))
		for m.Stats().Checkpoints <= before {
			if time.Now().After(deadline) {
				return sz, fmt.Errorf("%s: no checkpoint after the restore within 2 minutes", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		l := keeper.Last()
		after = append(after, l.Took)
		sz.AfterRestoreReused, sz.AfterRestoreFrames = l.Reused, l.Frames
	}
	sz.RestoreRuns = restoreRuns
	sz.RestoreMS, sz.NextMS, sz.AfterRestoreMS = round1(ms(median(lost))), round1(ms(median(next))), round1(ms(median(after)))
	return sz, nil
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
)

// firstCalls and settledFrom..settledTo are the calls the firstcalls tier
// compares: a worker's first 20 calls against calls 200-300 of the same
// worker, when V8 has long since tiered up Pyodide's hot wasm functions.
const (
	firstCalls  = 20
	settledFrom = 200
	settledTo   = 300
)

// firstCallsReport is how fast a worker started from the memory snapshot
// is at first, against itself once settled (issue 13, item 1): medians
// over -runs fresh one-worker pools, each number the median of that run.
type firstCallsReport struct {
	Runs int `json:"runs"`
	// PauseMS is how long the pool stood idle between ready and call 1.
	PauseMS int64 `json:"pause_ms"`
	// ReadyMS is from creating the pool to its worker's ready.
	ReadyMS float64 `json:"ready_ms"`
	// FirstMS and SettledMS are the per-call medians of calls 1-20 and
	// 200-300 (supervisor.Pool.Run of print(1), no MCP); InWorker* the
	// same calls' time inside the worker's Python helper.
	FirstMS           float64 `json:"first20_ms"`
	SettledMS         float64 `json:"settled_ms"`
	Ratio             float64 `json:"first20_over_settled"`
	FirstInWorkerMS   float64 `json:"first20_in_worker_ms"`
	SettledInWorkerMS float64 `json:"settled_in_worker_ms"`
	// FirstCallMS is the very first call, alone.
	FirstCallMS float64 `json:"first_call_ms"`
}

func benchFirstCalls(ctx context.Context, rt *supervisor.Runtime, runs int, pause time.Duration) (*firstCallsReport, error) {
	var ready, first, settled, firstIn, settledIn, one []time.Duration
	for r := range runs {
		rd, f, s, fi, si, o1, err := firstCallsOnce(ctx, rt, pause)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", r+1, err)
		}
		progress("firstcalls run %d: ready %.0f ms, first %d %.3f ms, settled %.3f ms (%.2fx)",
			r+1, ms(rd), firstCalls, ms(f), ms(s), float64(f)/float64(s))
		ready, first, settled = append(ready, rd), append(first, f), append(settled, s)
		firstIn, settledIn, one = append(firstIn, fi), append(settledIn, si), append(one, o1)
	}
	rep := &firstCallsReport{
		Runs: runs, PauseMS: pause.Milliseconds(), ReadyMS: round1(ms(median(ready))),
		FirstMS: round3(ms(median(first))), SettledMS: round3(ms(median(settled))),
		FirstInWorkerMS: round3(ms(median(firstIn))), SettledInWorkerMS: round3(ms(median(settledIn))),
		FirstCallMS: round3(ms(median(one))),
	}
	rep.Ratio = round2(float64(median(first)) / float64(median(settled)))
	return rep, nil
}

// firstCallsOnce starts a one-worker pool, waits for its worker, and makes
// settledTo calls, returning the ready time, the medians of the first and
// the settled calls, and of their time inside the worker, and the first
// call's time.
func firstCallsOnce(ctx context.Context, rt *supervisor.Runtime, pause time.Duration) (ready, first, settled, firstIn, settledIn, one time.Duration, err error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	began := time.Now()
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, log)
	if err != nil {
		return
	}
	defer pool.Close(ctx)
	// Polled, not waited on: the pool has no ready notice of its own, and
	// a millisecond's resolution is plenty for a start of ~250 ms.
	for pool.Stats().Ready < 1 {
		if s := pool.Stats(); s.StartError != "" {
			err = fmt.Errorf("worker start: %s", s.StartError)
			return
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
			return
		case <-time.After(time.Millisecond):
		}
	}
	ready = time.Since(began)
	// -firstcalls-pause tells calls apart from time: whatever a fresh
	// worker still does in the background (V8's compile jobs, its
	// collector) has had the pause to finish before the first call.
	select {
	case <-ctx.Done():
		err = ctx.Err()
		return
	case <-time.After(pause):
	}
	var wall, in []time.Duration
	for i := range settledTo {
		t0 := time.Now()
		res, e := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		d := time.Since(t0)
		if e != nil {
			err = e
			return
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			err = fmt.Errorf("call %d: status %s, stdout %q: %s", i+1, res.Status, res.Stdout, res.Error)
			return
		}
		wall, in = append(wall, d), append(in, res.InWorker)
	}
	return ready, median(wall[:firstCalls]), median(wall[settledFrom:]),
		median(in[:firstCalls]), median(in[settledFrom:]), wall[0], nil
}

// median is the middle of xs (the upper one of an even count).
func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

//go:build unix

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
	// After a pause only: the same worker, settled, left idle as long
	// again, then firstCalls more calls (ControlMS, their median). A
	// settled worker's calls after idle time are slower too on this kind
	// of machine (caches, the host's scheduling of an idle virtual CPU):
	// FirstOverControl is a fresh worker's first calls against a settled
	// one's after the same idle, the part that is the fresh worker's own.
	ControlMS        float64 `json:"settled_after_idle_ms,omitempty"`
	ControlRatio     float64 `json:"settled_after_idle_over_settled,omitempty"`
	FirstOverControl float64 `json:"first20_over_settled_after_idle,omitempty"`
	// IdleCPUMS is the CPU the worker used during the pause (all its
	// threads): its warming calls and V8's compiles they set off.
	IdleCPUMS float64 `json:"idle_cpu_ms"`
	// The same calls in CPU time rather than wall time, from the worker's
	// /proc/PID/task/TID/schedstat: what the thread running Python spent
	// on a CPU per call (median), how long it waited for one (mean), and
	// the mean CPU time per call of all the worker's other threads (V8's
	// background compiles and collector, Deno's I/O). Wall time on a
	// shared machine is mostly waiting; these tell what a call costs.
	FirstCPUus        float64 `json:"first20_call_thread_cpu_us"`
	SettledCPUus      float64 `json:"settled_call_thread_cpu_us"`
	CPURatio          float64 `json:"first20_over_settled_cpu"`
	FirstWaitUS       float64 `json:"first20_call_thread_wait_us"`
	SettledWaitUS     float64 `json:"settled_call_thread_wait_us"`
	FirstOtherCPUus   float64 `json:"first20_other_threads_cpu_us"`
	SettledOtherCPUus float64 `json:"settled_other_threads_cpu_us"`
}

// firstCallsRun is one fresh worker's figures, each a median or mean over
// its calls.
type firstCallsRun struct {
	ready, first, settled, firstIn, settledIn, one time.Duration
	control                                        time.Duration // after a pause only
	idleCPU                                        time.Duration // during the pause
	firstCPU, settledCPU                           time.Duration // medians, call thread
	firstWait, settledWait                         time.Duration // means, call thread
	firstOther, settledOther                       time.Duration // means, other threads
}

func benchFirstCalls(ctx context.Context, rt *supervisor.Runtime, runs int, pause time.Duration, warm int) (*firstCallsReport, error) {
	var ready, first, settled, firstIn, settledIn, one, idleCPU, control []time.Duration
	var firstCPU, settledCPU, firstWait, settledWait, firstOther, settledOther []time.Duration
	for r := range runs {
		x, err := firstCallsOnce(ctx, rt, pause, warm)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", r+1, err)
		}
		progress("firstcalls run %d: ready %.0f ms, first %d %.3f ms, settled %.3f ms (%.2fx); CPU of the call thread %.0f / %.0f us (%.2fx), other threads %.0f / %.0f us a call",
			r+1, ms(x.ready), firstCalls, ms(x.first), ms(x.settled), float64(x.first)/float64(x.settled),
			us(x.firstCPU), us(x.settledCPU), float64(x.firstCPU)/float64(x.settledCPU), us(x.firstOther), us(x.settledOther))
		ready, first, settled = append(ready, x.ready), append(first, x.first), append(settled, x.settled)
		firstIn, settledIn, one = append(firstIn, x.firstIn), append(settledIn, x.settledIn), append(one, x.one)
		idleCPU = append(idleCPU, x.idleCPU)
		control = append(control, x.control)
		firstCPU, settledCPU = append(firstCPU, x.firstCPU), append(settledCPU, x.settledCPU)
		firstWait, settledWait = append(firstWait, x.firstWait), append(settledWait, x.settledWait)
		firstOther, settledOther = append(firstOther, x.firstOther), append(settledOther, x.settledOther)
	}
	rep := &firstCallsReport{
		Runs: runs, PauseMS: pause.Milliseconds(), ReadyMS: round1(ms(median(ready))),
		FirstMS: round3(ms(median(first))), SettledMS: round3(ms(median(settled))),
		FirstInWorkerMS: round3(ms(median(firstIn))), SettledInWorkerMS: round3(ms(median(settledIn))),
		FirstCallMS: round3(ms(median(one))), IdleCPUMS: round1(ms(median(idleCPU))),
	}
	rep.Ratio = round2(float64(median(first)) / float64(median(settled)))
	if pause > 0 {
		rep.ControlMS = round3(ms(median(control)))
		rep.ControlRatio = round2(float64(median(control)) / float64(median(settled)))
		rep.FirstOverControl = round2(float64(median(first)) / float64(median(control)))
	}
	rep.FirstCPUus, rep.SettledCPUus = round1(us(median(firstCPU))), round1(us(median(settledCPU)))
	rep.CPURatio = round2(float64(median(firstCPU)) / float64(median(settledCPU)))
	rep.FirstWaitUS, rep.SettledWaitUS = round1(us(median(firstWait))), round1(us(median(settledWait)))
	rep.FirstOtherCPUus, rep.SettledOtherCPUus = round1(us(median(firstOther))), round1(us(median(settledOther)))
	return rep, nil
}

// firstCallsOnce starts a one-worker pool, waits for its worker, and makes
// settledTo calls, returning the ready time, the medians of the first and
// the settled calls, and of their time inside the worker, and the first
// call's time.
func firstCallsOnce(ctx context.Context, rt *supervisor.Runtime, pause time.Duration, warm int) (x firstCallsRun, err error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	began := time.Now()
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1, WarmCalls: warm}, log)
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
	x.ready = time.Since(began)
	pid, err := oldestChild("deno")
	if err != nil {
		return
	}
	th, err := workerThreads(pid)
	if err != nil {
		return
	}

	// -firstcalls-pause tells calls apart from time: whatever a fresh
	// worker still does in the background (V8's compile jobs, its
	// collector) has had the pause to finish before the first call.
	idle0, err := th.read()
	if err != nil {
		return
	}
	select {
	case <-ctx.Done():
		err = ctx.Err()
		return
	case <-time.After(pause):
	}
	idle1, err := th.read()
	if err != nil {
		return
	}
	x.idleCPU = idle1.callRun + idle1.otherRun - idle0.callRun - idle0.otherRun
	var wall, in, cpu, wait, other []time.Duration
	for i := range settledTo {
		before, e := th.read()
		if e != nil {
			err = e
			return
		}
		t0 := time.Now()
		res, e := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		d := time.Since(t0)
		after, e2 := th.read()
		if e == nil {
			e = e2
		}
		if e != nil {
			err = e
			return
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			err = fmt.Errorf("call %d: status %s, stdout %q: %s", i+1, res.Status, res.Stdout, res.Error)
			return
		}
		wall, in = append(wall, d), append(in, res.InWorker)
		cpu = append(cpu, after.callRun-before.callRun)
		wait = append(wait, after.callWait-before.callWait)
		other = append(other, after.otherRun-before.otherRun)
	}
	x.first, x.settled = median(wall[:firstCalls]), median(wall[settledFrom:])
	if pause > 0 {
		if x.control, err = settledAfterIdle(ctx, pool, pause); err != nil {
			return
		}
	}
	x.firstIn, x.settledIn, x.one = median(in[:firstCalls]), median(in[settledFrom:]), wall[0]
	x.firstCPU, x.settledCPU = median(cpu[:firstCalls]), median(cpu[settledFrom:])
	x.firstWait, x.settledWait = mean(wait[:firstCalls]), mean(wait[settledFrom:])
	x.firstOther, x.settledOther = mean(other[:firstCalls]), mean(other[settledFrom:])
	return x, nil
}

// mean is the average of xs.
func mean(xs []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range xs {
		sum += x
	}
	return sum / time.Duration(len(xs))
}

// median is the middle of xs (the upper one of an even count).
func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// settledAfterIdle leaves a settled pool idle for pause, then returns the
// median of its next firstCalls calls: what idle time alone costs the
// calls after it, without anything left for the worker to compile.
func settledAfterIdle(ctx context.Context, pool *supervisor.Pool, pause time.Duration) (time.Duration, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(pause):
	}
	var wall []time.Duration
	for i := range firstCalls {
		t0 := time.Now()
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint("control-", i+1), Code: code}, nil)
		if err != nil {
			return 0, err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return 0, fmt.Errorf("control call %d: status %s, stdout %q: %s", i+1, res.Status, res.Stdout, res.Error)
		}
		wall = append(wall, time.Since(t0))
	}
	return median(wall), nil
}

//go:build unix

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/supervisor"
)

// reuseReport: a two-worker pool whose calls, one at a time, have settled
// on one worker; its idle worker is killed and replaced, and the pool is
// left idle until the replacement is ready, as between an agent's calls.
// The next 20 calls against the settled ones: 1x when they stay on the
// used worker, a fresh worker's 2-3x (-only firstcalls) when they go to the
// replacement. Medians over -runs pools.
type reuseReport struct {
	Runs      int     `json:"runs"`
	SettledMS float64 `json:"settled_ms"`
	AfterMS   float64 `json:"after_replacement_ms"`
	Ratio     float64 `json:"after_over_settled"`
	// The same calls in CPU time of the threads running Python (both
	// workers' together: only one runs a call), medians.
	SettledCPUus float64 `json:"settled_python_cpu_us"`
	AfterCPUus   float64 `json:"after_replacement_python_cpu_us"`
	CPURatio     float64 `json:"after_over_settled_cpu"`
	// OnFresh is how many of the runs had a call after the replacement on
	// the replacement.
	OnFresh int `json:"runs_on_the_replacement"`
}

func benchReuse(ctx context.Context, rt *supervisor.Runtime, runs int) (*reuseReport, error) {
	var settled, after, settledCPU, afterCPU []time.Duration
	rep := &reuseReport{Runs: runs}
	for r := range runs {
		s, a, sc, ac, fresh, err := reuseOnce(ctx, rt)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", r+1, err)
		}
		progress("reuse run %d: settled %.3f ms, after the replacement %.3f ms (%.2fx); Python's CPU %.0f / %.0f us (%.2fx)%s", r+1, ms(s), ms(a), float64(a)/float64(s),
			us(sc), us(ac), float64(ac)/float64(sc),
			map[bool]string{true: ", on the replacement", false: ""}[fresh])
		settled, after = append(settled, s), append(after, a)
		settledCPU, afterCPU = append(settledCPU, sc), append(afterCPU, ac)
		if fresh {
			rep.OnFresh++
		}
	}
	rep.SettledMS, rep.AfterMS = round3(ms(median(settled))), round3(ms(median(after)))
	rep.Ratio = round2(float64(median(after)) / float64(median(settled)))
	rep.SettledCPUus, rep.AfterCPUus = round1(us(median(settledCPU))), round1(us(median(afterCPU)))
	rep.CPURatio = round2(float64(median(afterCPU)) / float64(median(settledCPU)))
	return rep, nil
}

func reuseOnce(ctx context.Context, rt *supervisor.Runtime) (settled, after, settledCPU, afterCPU time.Duration, onFresh bool, err error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 2}, log)
	if err != nil {
		return
	}
	defer pool.Close(ctx)
	if err = waitPool(ctx, pool, func(s supervisor.Stats) bool { return s.Ready == 2 }); err != nil {
		return
	}
	// pythonCPU is the CPU time the workers' Python threads have used.
	pythonCPU := func() (time.Duration, error) {
		var sum time.Duration
		for _, pid := range denoChildren() {
			th, err := workerThreads(pid)
			if err != nil {
				return 0, err
			}
			st, err := th.read()
			if err != nil {
				return 0, err
			}
			sum += st.callRun
		}
		return sum, nil
	}
	calls := func(n int) ([]time.Duration, []time.Duration, map[string]bool, error) {
		var ds, cpu []time.Duration
		ran := map[string]bool{}
		for i := range n {
			c0, err := pythonCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			t0 := time.Now()
			res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
			ds = append(ds, time.Since(t0))
			if err != nil {
				return nil, nil, nil, err
			}
			c1, err := pythonCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			cpu = append(cpu, c1-c0)
			if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
				return nil, nil, nil, fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
			}
			ran[res.Worker] = true
		}
		return ds, cpu, ran, nil
	}
	ds, cpu, ran, err := calls(settledTo)
	if err != nil {
		return
	}
	if len(ran) != 1 {
		err = fmt.Errorf("calls one at a time ran on %d workers", len(ran))
		return
	}
	settled, settledCPU = median(ds[settledFrom:]), median(cpu[settledFrom:])
	// The idle worker is the one that started last: the pool's second.
	kids := denoChildren()
	if len(kids) != 2 {
		err = fmt.Errorf("%d worker processes, want 2", len(kids))
		return
	}
	restarts := func(s supervisor.Stats) (n int64) {
		for _, v := range s.Counts.Restarts {
			n += v
		}
		return n
	}
	before := restarts(pool.Stats())
	if err = syscall.Kill(kids[1], syscall.SIGKILL); err != nil {
		return
	}
	if err = waitPool(ctx, pool, func(s supervisor.Stats) bool { return restarts(s) > before && s.Ready == 2 }); err != nil {
		return
	}
	ds, cpu, ran2, err := calls(firstCalls)
	if err != nil {
		return
	}
	for w := range ran2 {
		if !ran[w] {
			onFresh = true
			progress("reuse: a call after the replacement ran on %s; the calls before on %v, after on %v: %v",
				w, slices.Collect(maps.Keys(ran)), slices.Collect(maps.Keys(ran2)), pool.Stats().Counts.Restarts)
		}
	}
	return settled, median(ds), settledCPU, median(cpu), onFresh, nil
}

// waitPool polls the pool's stats until ok, or its start fails.
func waitPool(ctx context.Context, pool *supervisor.Pool, ok func(supervisor.Stats) bool) error {
	for {
		s := pool.Stats()
		if ok(s) {
			return nil
		}
		if s.StartError != "" {
			return fmt.Errorf("worker start: %s", s.StartError)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// denoChildren are this process's deno children, oldest first.
func denoChildren() []int {
	type kid struct {
		pid   int
		start int64
	}
	var kids []kid
	for _, pid := range procfs.Children(os.Getpid()) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if !strings.Contains(s, "(deno)") {
			continue
		}
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 20 {
			continue
		}
		start, _ := strconv.ParseInt(f[19], 10, 64)
		kids = append(kids, kid{pid, start})
	}
	slices.SortFunc(kids, func(a, b kid) int { return int(a.start - b.start) })
	var pids []int
	for _, k := range kids {
		pids = append(pids, k.pid)
	}
	return pids
}

//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// wallCalls caps the warm calls timed per worker in the wall tier, which
// starts 4 x -runs workers.
const wallCalls = 1000

// wallReport is what the OS sandbox around each worker costs (issue 29):
// one-worker pools (supervisor.Pool, no MCP) with --os-sandbox off and
// auto, under Python's default network (public: the worker keeps the
// host's network namespace) and under none (a new user and network
// namespace each). On a machine shared with other work the load drifts
// from second to second, so off and auto are measured in pairs: in each
// run, for each network, one pool of each is started (which first taking
// turns from run to run), then both take warm calls in alternation. The
// ratios are medians of each pair's ratio.
type wallReport struct {
	Runs  int `json:"runs"`
	Calls int `json:"calls"`
	// Layers are those auto applied on this machine.
	Layers   []oswall.Layer `json:"layers"`
	Variants []wallVariant  `json:"variants"`
	// The ratios auto / off, medians over the runs' pairs, for each
	// network.
	StartRatio        float64 `json:"start_auto_over_off"`
	StartCPURatio     float64 `json:"start_cpu_auto_over_off"`
	WarmRatio         float64 `json:"warm_p50_auto_over_off"`
	WarmCPURatio      float64 `json:"warm_cpu_auto_over_off"`
	NoNetStartRatio   float64 `json:"start_auto_over_off_network_none"`
	NoNetStartCPU     float64 `json:"start_cpu_auto_over_off_network_none"`
	NoNetWarmRatio    float64 `json:"warm_p50_auto_over_off_network_none"`
	NoNetWarmCPURatio float64 `json:"warm_cpu_auto_over_off_network_none"`
	// The launcher alone: /bin/true run directly and behind every layer
	// (through this program, which is the launcher here as pyrun is in
	// pyrun), taking turns; medians of wall time and of the child's CPU
	// time (its rusage), each way.
	TrueMS        float64 `json:"true_ms"`
	TrueCPUMS     float64 `json:"true_cpu_ms"`
	LaunchedMS    float64 `json:"true_launched_ms"`
	LaunchedCPUMS float64 `json:"true_launched_cpu_ms"`
}

// wallVariant is one configuration's figures, medians over the runs.
type wallVariant struct {
	Mode    oswall.Mode        `json:"mode"`
	Network supervisor.Network `json:"network"`
	// ReadyMS is from creating the pool to its worker's ready (from the
	// memory snapshot); ReadyCPUMS the CPU time its process had used by
	// then, the launcher's included (it is the same process).
	ReadyMS    float64 `json:"ready_ms"`
	ReadyCPUMS float64 `json:"ready_cpu_ms"`
	// WarmP50MS is the median of each worker's p50 of print(1) after
	// -warmup calls; WarmCPUus the worker's CPU time per call.
	WarmP50MS float64 `json:"warm_p50_ms"`
	WarmCPUus float64 `json:"warm_cpu_us"`

	runs []wallRun
}

type wallRun struct{ ready, readyCPU, warm, warmCPU time.Duration }

func benchWall(ctx context.Context, rt *supervisor.Runtime, runs, n, warmup int) (*wallReport, error) {
	n = min(n, wallCalls)
	rep := &wallReport{Runs: runs, Calls: n, Layers: oswall.Describe(oswall.ModeAuto, oswall.Probe()).Layers}
	pairs := [][2]*wallVariant{
		{{Mode: oswall.ModeOff, Network: supervisor.NetworkPublic}, {Mode: oswall.ModeAuto, Network: supervisor.NetworkPublic}},
		{{Mode: oswall.ModeOff, Network: supervisor.NetworkNone}, {Mode: oswall.ModeAuto, Network: supervisor.NetworkNone}},
	}
	// One pair of each, not counted: the first start of a configuration
	// finds colder caches (and, behind the sandbox, may fill Deno's).
	for _, pair := range pairs {
		if _, err := wallPair(ctx, rt, pair, false, 10, 0); err != nil {
			return nil, err
		}
	}
	if err := benchLauncher(ctx, rep); err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	for r := range runs {
		for _, pair := range pairs {
			x, err := wallPair(ctx, rt, pair, r%2 == 1, n, warmup)
			if err != nil {
				return nil, fmt.Errorf("run %d, network %s: %w", r+1, pair[0].Network, err)
			}
			for i, v := range pair {
				v.runs = append(v.runs, x[i])
				progress("wall run %d, %s, network %s: ready %.0f ms (CPU %.0f ms), warm p50 %.3f ms (worker CPU %.0f us a call)",
					r+1, v.Mode, v.Network, ms(x[i].ready), ms(x[i].readyCPU), ms(x[i].warm), us(x[i].warmCPU))
			}
		}
	}
	// ratios is the median over the runs of auto's figure over off's.
	ratios := func(pair [2]*wallVariant, f func(wallRun) time.Duration) float64 {
		var rs []float64
		for i := range pair[0].runs {
			rs = append(rs, float64(f(pair[1].runs[i]))/float64(f(pair[0].runs[i])))
		}
		return round3(median(rs))
	}
	get := func(f func(wallRun) time.Duration, v *wallVariant) time.Duration {
		var ds []time.Duration
		for _, x := range v.runs {
			ds = append(ds, f(x))
		}
		return median(ds)
	}
	ready := func(x wallRun) time.Duration { return x.ready }
	readyCPU := func(x wallRun) time.Duration { return x.readyCPU }
	warm := func(x wallRun) time.Duration { return x.warm }
	warmCPU := func(x wallRun) time.Duration { return x.warmCPU }
	for _, pair := range pairs {
		for _, v := range pair {
			v.ReadyMS, v.ReadyCPUMS = round1(ms(get(ready, v))), round1(ms(get(readyCPU, v)))
			v.WarmP50MS, v.WarmCPUus = round3(ms(get(warm, v))), round1(us(get(warmCPU, v)))
			rep.Variants = append(rep.Variants, *v)
		}
	}
	rep.StartRatio, rep.StartCPURatio = ratios(pairs[0], ready), ratios(pairs[0], readyCPU)
	rep.WarmRatio, rep.WarmCPURatio = ratios(pairs[0], warm), ratios(pairs[0], warmCPU)
	rep.NoNetStartRatio, rep.NoNetStartCPU = ratios(pairs[1], ready), ratios(pairs[1], readyCPU)
	rep.NoNetWarmRatio, rep.NoNetWarmCPURatio = ratios(pairs[1], warm), ratios(pairs[1], warmCPU)
	return rep, nil
}

// launcherRuns is how many times benchLauncher runs /bin/true each way.
const launcherRuns = 60

// benchLauncher times what the launcher adds to starting a program.
func benchLauncher(ctx context.Context, rep *wallReport) error {
	execs, read, err := oswall.ProgramNeeds("/bin/true")
	if err != nil {
		return err
	}
	all := oswall.Set{Base: true, Seccomp: true, Landlock: true, NetNS: true}
	var wall, cpu [2][]time.Duration
	for i := range 2 * launcherRuns {
		cmd := exec.CommandContext(ctx, "/bin/true")
		walled := i%2 == 1
		if walled {
			if err := oswall.Wrap(cmd, oswall.Policy{Exec: execs, Read: read, Layers: all}); err != nil {
				return err
			}
		}
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return err
		}
		k := i % 2
		wall[k] = append(wall[k], time.Since(t0))
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu[k] = append(cpu[k], time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))
	}
	rep.TrueMS, rep.TrueCPUMS = round3(ms(median(wall[0]))), round3(ms(median(cpu[0])))
	rep.LaunchedMS, rep.LaunchedCPUMS = round3(ms(median(wall[1]))), round3(ms(median(cpu[1])))
	progress("launcher: /bin/true %.1f ms (CPU %.1f ms), behind every layer %.1f ms (CPU %.1f ms)",
		rep.TrueMS, rep.TrueCPUMS, rep.LaunchedMS, rep.LaunchedCPUMS)
	return nil
}

// wallPair times the start of a one-worker pool of each of pair, alone,
// one after the other (auto first when autoFirst), then makes warmup and
// n calls of print(1) on one of each, the two taking turns call by call.
func wallPair(ctx context.Context, rt *supervisor.Runtime, pair [2]*wallVariant, autoFirst bool, n, warmup int) (x [2]wallRun, err error) {
	var pools [2]*supervisor.Pool
	var pids [2]int
	defer func() {
		for _, p := range pools {
			if p != nil {
				p.Close(ctx)
			}
		}
	}()
	first, second := 0, 1
	if autoFirst {
		first, second = 1, 0
	}
	// Each start is timed alone: a fresh worker keeps a CPU busy for a
	// while after its ready, which would slow a start beside it. So the
	// first is started, timed and closed, the second started and timed,
	// and the first started again, untimed, for the warm calls.
	for step, i := range []int{first, second, first} {
		var ready time.Duration
		if pools[i], pids[i], ready, err = wallStart(ctx, rt, pair[i], pids[:]); err != nil {
			return
		}
		if step < 2 {
			x[i].ready = ready
			if x[i].readyCPU, err = cpuTime(pids[i]); err != nil {
				return
			}
		}
		if step == 0 {
			pools[i].Close(ctx)
			pools[i], pids[i] = nil, 0
		}
	}
	var took [2][]time.Duration
	var before [2]time.Duration
	for c := range warmup + n {
		if c == warmup {
			for i := range pids {
				if before[i], err = cpuTime(pids[i]); err != nil {
					return
				}
			}
		}
		for k := range 2 {
			i := (c + k) % 2 // which goes first takes turns too
			t0 := time.Now()
			res, e := pools[i].Run(ctx, supervisor.Job{ID: fmt.Sprint(c + 1), Code: code}, nil)
			d := time.Since(t0)
			if e != nil {
				err = e
				return
			}
			if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
				err = fmt.Errorf("%s: status %s, stdout %q: %s", pair[i].Mode, res.Status, res.Stdout, res.Error)
				return
			}
			if c >= warmup {
				took[i] = append(took[i], d)
			}
		}
	}
	for i := range pids {
		after, e := cpuTime(pids[i])
		if e != nil {
			err = e
			return
		}
		x[i].warm = median(took[i])
		x[i].warmCPU = (after - before[i]) / time.Duration(max(n, 1))
	}
	return x, nil
}

// wallStart starts a one-worker pool of v and waits for its worker, which
// is not one of known.
func wallStart(ctx context.Context, rt *supervisor.Runtime, v *wallVariant, known []int) (*supervisor.Pool, int, time.Duration, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	began := time.Now()
	// No warming calls: they would take the CPU the start is timed on.
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1, OSSandbox: v.Mode, Network: v.Network, WarmCalls: -1}, log)
	if err != nil {
		return nil, 0, 0, err
	}
	for pool.Stats().Ready < 1 {
		if s := pool.Stats(); s.StartError != "" {
			pool.Close(ctx)
			return nil, 0, 0, fmt.Errorf("worker start: %s", s.StartError)
		}
		select {
		case <-ctx.Done():
			pool.Close(ctx)
			return nil, 0, 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	ready := time.Since(began)
	// Its worker is the Deno child no other pool of the pair has.
	for _, pid := range procfs.Children(os.Getpid()) {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && string(comm) == "deno\n" && !slices.Contains(known, pid) {
			return pool, pid, ready, nil
		}
	}
	pool.Close(ctx)
	return nil, 0, 0, errors.New("its worker is not among this process's children")
}

func printWall(w io.Writer, r *wallReport) {
	fmt.Fprintf(w, "OS sandbox (layers of auto here: %v), one-worker pools in pairs off / auto, medians of %d runs, %d warm calls each taking turns:\n", r.Layers, r.Runs, r.Calls)
	for _, v := range r.Variants {
		fmt.Fprintf(w, "  %-4s network %-6s: ready %7.1f ms, CPU by ready %7.1f ms; warm print(1) p50 %.3f ms, worker CPU %5.0f us a call\n",
			v.Mode, v.Network, v.ReadyMS, v.ReadyCPUMS, v.WarmP50MS, v.WarmCPUus)
	}
	fmt.Fprintf(w, "  the launcher alone: /bin/true %.1f ms (CPU %.1f ms) directly, %.1f ms (CPU %.1f ms) behind every layer\n",
		r.TrueMS, r.TrueCPUMS, r.LaunchedMS, r.LaunchedCPUMS)
	fmt.Fprintf(w, "  auto / off, medians of the pairs' ratios\n")
	fmt.Fprintf(w, "  auto / off, network public: start %.3fx (CPU %.3fx), warm p50 %.3fx (CPU %.3fx)\n", r.StartRatio, r.StartCPURatio, r.WarmRatio, r.WarmCPURatio)
	fmt.Fprintf(w, "  auto / off, network none:   start %.3fx (CPU %.3fx), warm p50 %.3fx (CPU %.3fx)\n", r.NoNetStartRatio, r.NoNetStartCPU, r.NoNetWarmRatio, r.NoNetWarmCPURatio)
}

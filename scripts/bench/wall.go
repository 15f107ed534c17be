package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// wallCalls caps the warm calls timed per worker in the wall tier, which
// starts 4 x -runs workers.
const wallCalls = 1000

// wallReport is what the OS sandbox around each worker costs (issue 29):
// one-worker pools (supervisor.Pool, no MCP) started with --os-sandbox off
// and auto, with Python's default network (public: the worker keeps the
// host's network namespace) and with none (a new user and network
// namespace each), the four taking turns run after run so that the
// machine's load drifts over all alike.
type wallReport struct {
	Runs  int `json:"runs"`
	Calls int `json:"calls"`
	// Layers are those auto applied on this machine.
	Layers   []oswall.Layer `json:"layers"`
	Variants []wallVariant  `json:"variants"`
	// The ratios auto / off of the medians, for each network.
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

	ready, readyCPU, warm, warmCPU []time.Duration
}

func benchWall(ctx context.Context, rt *supervisor.Runtime, runs, n, warmup int) (*wallReport, error) {
	n = min(n, wallCalls)
	rep := &wallReport{Runs: runs, Calls: n, Layers: oswall.Describe(oswall.ModeAuto, oswall.Probe()).Layers}
	variants := []*wallVariant{
		{Mode: oswall.ModeOff, Network: supervisor.NetworkPublic}, {Mode: oswall.ModeAuto, Network: supervisor.NetworkPublic},
		{Mode: oswall.ModeOff, Network: supervisor.NetworkNone}, {Mode: oswall.ModeAuto, Network: supervisor.NetworkNone},
	}
	// One start of each, not counted: the first start of a configuration
	// finds colder caches (and, behind the sandbox, may fill Deno's).
	for _, v := range variants {
		if _, err := wallOnce(ctx, rt, v, 10, 0); err != nil {
			return nil, err
		}
	}
	if err := benchLauncher(ctx, rep); err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	for r := range runs {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			x, err := wallOnce(ctx, rt, v, n, warmup)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s network %s: %w", r+1, v.Mode, v.Network, err)
			}
			v.ready, v.readyCPU = append(v.ready, x.ready), append(v.readyCPU, x.readyCPU)
			v.warm, v.warmCPU = append(v.warm, x.warm), append(v.warmCPU, x.warmCPU)
			progress("wall run %d, %s, network %s: ready %.0f ms (CPU %.0f ms), warm p50 %.3f ms (worker CPU %.0f us a call)",
				r+1, v.Mode, v.Network, ms(x.ready), ms(x.readyCPU), ms(x.warm), us(x.warmCPU))
		}
	}
	for _, v := range variants {
		v.ReadyMS, v.ReadyCPUMS = round1(ms(median(v.ready))), round1(ms(median(v.readyCPU)))
		v.WarmP50MS, v.WarmCPUus = round3(ms(median(v.warm))), round1(us(median(v.warmCPU)))
		rep.Variants = append(rep.Variants, *v)
	}
	ratio := func(a, b time.Duration) float64 { return round3(float64(a) / float64(b)) }
	off, auto := variants[0], variants[1]
	rep.StartRatio, rep.StartCPURatio = ratio(median(auto.ready), median(off.ready)), ratio(median(auto.readyCPU), median(off.readyCPU))
	rep.WarmRatio, rep.WarmCPURatio = ratio(median(auto.warm), median(off.warm)), ratio(median(auto.warmCPU), median(off.warmCPU))
	off, auto = variants[2], variants[3]
	rep.NoNetStartRatio, rep.NoNetStartCPU = ratio(median(auto.ready), median(off.ready)), ratio(median(auto.readyCPU), median(off.readyCPU))
	rep.NoNetWarmRatio, rep.NoNetWarmCPURatio = ratio(median(auto.warm), median(off.warm)), ratio(median(auto.warmCPU), median(off.warmCPU))
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

type wallRun struct{ ready, readyCPU, warm, warmCPU time.Duration }

// wallOnce starts a one-worker pool of v, times its start and n warm calls.
func wallOnce(ctx context.Context, rt *supervisor.Runtime, v *wallVariant, n, warmup int) (x wallRun, err error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	began := time.Now()
	// No warming calls: they would take the CPU the start is timed on.
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1, OSSandbox: v.Mode, Network: v.Network, WarmCalls: -1}, log)
	if err != nil {
		return
	}
	defer pool.Close(ctx)
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
	if x.readyCPU, err = cpuTime(pid); err != nil {
		return
	}
	var before time.Duration
	s, err := measure(n, warmup, func(i int) error {
		if i == warmup {
			before, _ = cpuTime(pid)
		}
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		if err != nil {
			return err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
		}
		return nil
	})
	if err != nil {
		return
	}
	after, err := cpuTime(pid)
	if err != nil {
		return
	}
	x.warm = median(s.durations)
	x.warmCPU = (after - before) / time.Duration(n)
	return x, nil
}

func printWall(w io.Writer, r *wallReport) {
	fmt.Fprintf(w, "OS sandbox (layers of auto here: %v), one-worker pools, medians of %d runs taking turns, %d warm calls each:\n", r.Layers, r.Runs, r.Calls)
	for _, v := range r.Variants {
		fmt.Fprintf(w, "  %-4s network %-6s: ready %7.1f ms, CPU by ready %7.1f ms; warm print(1) p50 %.3f ms, worker CPU %5.0f us a call\n",
			v.Mode, v.Network, v.ReadyMS, v.ReadyCPUMS, v.WarmP50MS, v.WarmCPUus)
	}
	fmt.Fprintf(w, "  the launcher alone: /bin/true %.1f ms (CPU %.1f ms) directly, %.1f ms (CPU %.1f ms) behind every layer\n",
		r.TrueMS, r.TrueCPUMS, r.LaunchedMS, r.LaunchedCPUMS)
	fmt.Fprintf(w, "  auto / off, network public: start %.3fx (CPU %.3fx), warm p50 %.3fx (CPU %.3fx)\n", r.StartRatio, r.StartCPURatio, r.WarmRatio, r.WarmCPURatio)
	fmt.Fprintf(w, "  auto / off, network none:   start %.3fx (CPU %.3fx), warm p50 %.3fx (CPU %.3fx)\n", r.NoNetStartRatio, r.NoNetStartCPU, r.NoNetWarmRatio, r.NoNetWarmCPURatio)
}

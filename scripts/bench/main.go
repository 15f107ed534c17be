// Command bench measures how fast pyrun is, and how much memory it takes,
// against the floor it is built on. Run it from anywhere in the module:
//
//	go run ./scripts/bench                  # everything, about two minutes
//	go run ./scripts/bench -n 500 -runs 3   # quicker, rougher
//	go run ./scripts/bench -pyrun bin/pyrun -only warm,spawn
//
// It prints a table, each figure next to its target, then the whole report
// as one line of JSON (also written to -json FILE). README.md in this
// folder says what each figure measures, and where a warm call spends its
// time. The runtime (Deno, Pyodide and the memory snapshot) comes from
// -runtime-dir and is installed there on first use, before anything is
// timed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// code is what every warm call runs.
const code = "print(1)"

type opts struct {
	bin        string
	runtimeDir string
	n, warmup  int
	runs       int
	cpuCalls   int
	procCalls  int
	poolSizes  []int
	only       map[string]bool
	jsonFile   string
	profileDir string
	nginxConf  string
	firstPause time.Duration
	firstIdle  time.Duration
	warmCalls  int
}

// measurements, in the order they run.
var measurements = []string{"warm", "http", "spawn", "pool", "preload", "replace", "throughput", "process", "memory", "agent", "toolcall", "firstcalls", "reuse", "languages", "tsclient", "lb"}

// byDefault are the measurements a plain run makes: lb needs nginx and two
// cores to itself, so it runs only when asked for (-only lb).
var byDefault = measurements[:len(measurements)-1]

func main() {
	if t := os.Getenv(mcpFloorEnv); t != "" {
		if err := serveMCPFloor(t); err != nil {
			fail(err)
		}
		return
	}
	var o opts
	var only string
	flag.StringVar(&o.bin, "pyrun", "", "pyrun binary to measure (default: build ./cmd/pyrun into a temporary folder)")
	flag.StringVar(&o.runtimeDir, "runtime-dir", supervisor.DefaultRuntimeRoot(), "pyrun's runtime folder")
	flag.IntVar(&o.n, "n", 2000, "measured warm calls per tier")
	flag.IntVar(&o.warmup, "warmup", 200, "warm calls before measuring, not counted")
	flag.IntVar(&o.runs, "runs", 5, "repetitions of each start-up measurement")
	flag.IntVar(&o.cpuCalls, "cpu-calls", 200, "calls in the 8-way CPU throughput run")
	flag.IntVar(&o.procCalls, "process-calls", 40, "calls in the --isolation process run")
	flag.StringVar(&only, "only", strings.Join(byDefault, ","), "measurements to run: "+strings.Join(measurements, ", "))
	flag.StringVar(&o.nginxConf, "nginx-conf", filepath.Join("configs", "nginx", "pyrun.conf"), "lb: the nginx config to run (its instance addresses are replaced)")
	flag.DurationVar(&o.firstPause, "firstcalls-pause", 0, "firstcalls: idle time between the worker's ready and its first call")
	flag.DurationVar(&o.firstIdle, "firstcalls-idle", 3*time.Second, "firstcalls: the idle time of its second part, in which the worker runs its warming calls (0: no second part)")
	flag.IntVar(&o.warmCalls, "warm-calls", 0, "firstcalls: the pool's Config.WarmCalls (0: its default, negative: none)")
	pools := flag.String("pool", "2", "pool sizes to time from start to all ready, comma-separated")
	flag.StringVar(&o.jsonFile, "json", "", "also write the JSON report to this file")
	flag.StringVar(&o.profileDir, "profile", "", "write a Go CPU profile of pyrun during the warm stdio calls into this folder (pyrun-stdio.pprof)")
	flag.Parse()
	o.only = map[string]bool{}
	for _, m := range strings.Split(only, ",") {
		if m = strings.TrimSpace(m); m != "" {
			if !slices.Contains(measurements, m) {
				fail(fmt.Errorf("unknown measurement %q", m))
			}
			o.only[m] = true
		}
	}
	for _, f := range strings.Split(*pools, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-pool: %q is not a pool size", f))
		}
		o.poolSizes = append(o.poolSizes, n)
	}
	if o.n < 1 || o.warmup < 0 || o.runs < 1 || o.cpuCalls < 8 || o.procCalls < 2 {
		fail(fmt.Errorf("-n, -runs must be at least 1, -cpu-calls 8, -process-calls 2, -warmup 0"))
	}
	// The MCP client decodes like pyrun's server does, with a lot of
	// short-lived garbage; pyrun collects at GOGC=400 (cmd/pyrun/gc.go), and
	// so does its client here, so that the client's collector does not
	// pass for pyrun's latency.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if err := run(context.Background(), &o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func run(ctx context.Context, o *opts) error {
	if o.bin == "" {
		dir, err := os.MkdirTemp("", "pyrun-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.bin = filepath.Join(dir, "pyrun")
		progress("building pyrun")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.bin, "github.com/pyrun/pyrun/cmd/pyrun")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build pyrun: %w", err)
		}
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: os.Stderr})
	rt, err := supervisor.Provision(ctx, o.runtimeDir, os.Stderr, log)
	if err != nil {
		return err
	}
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Code: code}
	rep.Versions.Pyodide, rep.Versions.Python = rt.Pyodide, rt.Python
	if v, err := rt.DenoVersion(ctx); err == nil {
		rep.Versions.Deno = strings.Fields(v)[0]
	}
	if out, err := exec.CommandContext(ctx, o.bin, "version").Output(); err == nil {
		rep.Versions.Pyrun = strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "pyrun ")
	}
	snapLog := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Info, Output: os.Stderr})
	snap, err := supervisor.EnsureSnapshot(ctx, rt, supervisor.Config{}, snapLog)
	if err != nil {
		return fmt.Errorf("memory snapshot: %w", err)
	}
	rep.Snapshot = snapshotReport{SizeMiB: snap.Size >> 20, Built: snap.Built}
	if snap.Built {
		rep.Snapshot.BuildS = round3(snap.BuildTime.Seconds())
	}
	rep.LoadBefore = loadAverage()

	if o.only["warm"] {
		progress("warm print(1): floor (bare Deno+Pyodide), %d calls", o.n)
		floor, floorCPU, err := benchFloor(ctx, rt, code, "1\n", o.n, o.warmup)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		progress("warm print(1): supervisor (pool.Run, no MCP), %d calls", o.n)
		sup, inWorker, supCPU, err := benchSupervisor(ctx, rt, o.n, o.warmup)
		if err != nil {
			return fmt.Errorf("supervisor: %w", err)
		}
		progress("warm print(1): MCP floor (go-sdk server and client, canned result), %d calls", o.n)
		mcpFloor, mcpFloorCPU, err := benchMCPFloor(ctx, "stdio", o.n, o.warmup)
		if err != nil {
			return fmt.Errorf("MCP floor: %w", err)
		}
		progress("warm print(1): pyrun stdio (MCP), %d calls", o.n)
		stdio, stdioInPool, cpu, err := benchStdio(ctx, o)
		if err != nil {
			return fmt.Errorf("stdio: %w", err)
		}
		rep.Warm = &warmReport{
			N: o.n, Floor: summarize(floor), Supervisor: summarize(sup), InWorker: summarize(inWorker), Stdio: summarize(stdio),
			FloorCPUUS: floorCPU, SupervisorWorkerCPUUS: supCPU, StdioCPU: cpu,
			MCPFloor: summarize(mcpFloor), MCPFloorCPUUS: mcpFloorCPU,
		}
		if len(stdioInPool.durations) > 0 {
			rep.Warm.StdioInPool = summarize(stdioInPool)
		}
		w := rep.Warm
		// The least stdio can take with the go-sdk on both ends: the SDK's
		// round trip, then pyrun's worker behind it.
		w.StdioBestOverFloor = round2((w.MCPFloor.P50 + w.Supervisor.P50) / w.Floor.P50)
		w.PyrunMCPLayerMS = round3(w.Stdio.P50 - w.MCPFloor.P50 - w.Supervisor.P50)
		rep.Warm.SupervisorOverFloor = ratios(rep.Warm.Supervisor, rep.Warm.Floor)
		rep.Warm.StdioOverFloor = ratios(rep.Warm.Stdio, rep.Warm.Floor)
		if len(stdio.first) == firstCalls {
			f := ms(median(stdio.first))
			rep.Warm.StdioFirstMS = round3(f)
			rep.Warm.StdioFirstOverSettled = round2(f / rep.Warm.Stdio.P50)
		}
	}
	if o.only["http"] {
		if rep.Warm == nil {
			return errors.New("http: the warm measurement is the floor these figures are ratios to: add warm to -only")
		}
		progress("warm print(1): MCP floor over Streamable HTTP, %d calls", o.n)
		s, _, err := benchMCPFloor(ctx, "http", o.n, o.warmup)
		if err != nil {
			return fmt.Errorf("MCP floor over HTTP: %w", err)
		}
		st := summarize(s)
		rep.Warm.HTTP = append(rep.Warm.HTTP, httpReport{Transport: "mcp-floor-http", stats: st, OverFloor: ratios(st, rep.Warm.Floor)})
		for _, tr := range []string{"stateful", "stateless", "2026-07-28", "sse"} {
			progress("warm print(1): pyrun serve, %s, %d calls", tr, o.n)
			s, err := benchHTTP(ctx, o, tr)
			if err != nil {
				return fmt.Errorf("http %s: %w", tr, err)
			}
			st := summarize(s)
			rep.Warm.HTTP = append(rep.Warm.HTTP, httpReport{Transport: tr, stats: st, OverFloor: ratios(st, rep.Warm.Floor)})
		}
	}
	// Each of these gets five minutes: one that waits for something that
	// never happens (a worker that is not replaced) fails instead of hanging.
	steps := []struct {
		name, what string
		run        func(ctx context.Context) error
	}{
		{"spawn", fmt.Sprintf("spawn to first result, %d runs", o.runs), func(ctx context.Context) (err error) {
			rep.Spawn, rep.SpawnParts, err = benchSpawn(ctx, o)
			return err
		}},
		{"pool", fmt.Sprintf("pools of %v ready, %d runs each", o.poolSizes, o.runs), func(ctx context.Context) error {
			for _, n := range o.poolSizes {
				s, err := benchPoolReady(ctx, o, n, nil)
				if err != nil {
					return err
				}
				rep.PoolReady = append(rep.PoolReady, poolReport{Workers: n, series: s})
			}
			return nil
		}},
		{"preload", fmt.Sprintf("pool of 2 ready with a wheel preloaded (--deps), %d runs", o.runs), func(ctx context.Context) error {
			dir, err := os.MkdirTemp("", "pyrun-bench-wheels-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if err := writeWheel(dir, "benchpkg", "1.0"); err != nil {
				return err
			}
			s, err := benchPoolReady(ctx, o, 2, []string{"--wheelhouse", dir, "--deps", "benchpkg", "--pypi", "none"})
			if err != nil {
				return err
			}
			rep.PoolReady = append(rep.PoolReady, poolReport{Workers: 2, Deps: "benchpkg", series: s})
			return nil
		}},
		{"replace", fmt.Sprintf("killed worker replaced, %d runs", o.runs), func(ctx context.Context) (err error) {
			rep.Replace, err = benchReplace(ctx, o)
			return err
		}},
		{"throughput", fmt.Sprintf("8 concurrent 50 ms CPU calls on 2 workers, %d calls", o.cpuCalls), func(ctx context.Context) (err error) {
			rep.Throughput, err = benchThroughput(ctx, o)
			return err
		}},
		{"process", fmt.Sprintf("--isolation process, %d calls", o.procCalls), func(ctx context.Context) (err error) {
			rep.Process, err = benchProcess(ctx, o)
			return err
		}},
		{"memory", "idle memory of pyrun and 2 workers", func(ctx context.Context) (err error) {
			rep.Memory, err = benchMemory(ctx, o)
			return err
		}},
		{"agent", fmt.Sprintf("agent run: %d blocks in one Python session against a stateless replay, %d runs", len(agentBlocks), o.runs),
			func(ctx context.Context) (err error) {
				rep.Agent, err = benchAgent(ctx, o)
				return err
			}},
		{"toolcall", "code mode: tool calls from Python to server-memory", func(ctx context.Context) (err error) {
			rep.ToolCall, err = benchToolCall(ctx, o)
			return err
		}},
		{"reuse", fmt.Sprintf("calls after a replacement joins a settled two-worker pool, %d runs", o.runs), func(ctx context.Context) (err error) {
			rep.Reuse, err = benchReuse(ctx, rt, o.runs)
			return err
		}},
		{"firstcalls", fmt.Sprintf("first %d calls of a fresh worker against calls %d-%d, %d runs", firstCalls, settledFrom, settledTo, o.runs),
			func(ctx context.Context) (err error) {
				if rep.FirstCalls, err = benchFirstCalls(ctx, rt, o.runs, o.firstPause, o.warmCalls); err != nil || o.firstIdle <= 0 {
					return err
				}
				// As a pool's fresh worker usually is when a call comes: it
				// started ahead, and ran its warming calls meanwhile.
				rep.FirstCallsIdle, err = benchFirstCalls(ctx, rt, o.runs, o.firstIdle, o.warmCalls)
				return err
			}},
		{"languages", "each language alone: spawn to first result, warm calls, idle worker memory", func(ctx context.Context) (err error) {
			rep.Languages, err = benchLanguages(ctx, o)
			return err
		}},
		{"tsclient", fmt.Sprintf("the TypeScript SDK client on pyrun stdio --workers 1: %d fresh servers, %d settled calls", o.runs, o.n),
			func(ctx context.Context) (err error) {
				rep.TSClient, err = benchTSClient(ctx, rt, o)
				return err
			}},
		{"lb", fmt.Sprintf("behind nginx: 1 instance on 1 core, then 2 on 2 cores, %d 50 ms CPU calls each", o.cpuCalls), func(ctx context.Context) (err error) {
			rep.LB, err = benchLB(ctx, o)
			return err
		}},
	}
	for _, st := range steps {
		if !o.only[st.name] {
			continue
		}
		progress("%s", st.what)
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			return st.run(ctx)
		}()
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	rep.LoadAfter = loadAverage()
	rep.Targets = rep.checkTargets()

	rep.print(os.Stdout)
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	if o.jsonFile != "" {
		return os.WriteFile(o.jsonFile, append(line, '\n'), 0o644)
	}
	return nil
}

// ---- warm calls --------------------------------------------------------------

// sample is one measured series.
type sample struct {
	durations []time.Duration // one per call, in call order
	wall      time.Duration   // the whole series
	// first is the first firstCalls warm-up calls, timed too: on a fresh
	// server, what the first calls cost before the worker settles.
	first []time.Duration
}

// measure calls call warmup times, then n times timing each.
func measure(n, warmup int, call func(i int) error) (sample, error) {
	var first []time.Duration
	for i := range warmup {
		t0 := time.Now()
		if err := call(i); err != nil {
			return sample{}, fmt.Errorf("warm-up call %d: %w", i, err)
		}
		if i < firstCalls {
			first = append(first, time.Since(t0))
		}
	}
	s := sample{durations: make([]time.Duration, n), first: first}
	began := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := call(warmup + i); err != nil {
			return sample{}, fmt.Errorf("call %d: %w", warmup+i, err)
		}
		s.durations[i] = time.Since(t0)
	}
	s.wall = time.Since(began)
	return s, nil
}

// benchSupervisor measures the same call on pyrun's pool directly: the
// worker program and the supervisor, without MCP. It also returns the part
// of each call spent in the worker's Python helper, as the worker measured
// it, and the worker process's CPU time per call in microseconds.
func benchSupervisor(ctx context.Context, rt *supervisor.Runtime, n, warmup int) (sample, sample, float64, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, log)
	if err != nil {
		return sample{}, sample{}, 0, err
	}
	defer pool.Close(ctx)
	var inWorker sample
	var before time.Duration
	workerCPU := func() (t time.Duration) {
		for _, pid := range childrenOf(os.Getpid()) {
			d, _ := cpuTime(pid)
			t += d
		}
		return t
	}
	s, err := measure(n, warmup, func(i int) error {
		if i == warmup {
			before = workerCPU()
		}
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		if err != nil {
			return err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
		}
		if i >= warmup {
			inWorker.durations = append(inWorker.durations, res.InWorker)
		}
		return nil
	})
	inWorker.wall = s.wall
	return s, inWorker, perCallUS(workerCPU()-before, n), err
}

// perCallUS is a CPU time spread over n calls, in microseconds.
func perCallUS(d time.Duration, n int) float64 { return round1(float64(d.Microseconds()) / float64(n)) }

// benchStdio measures tool calls against `pyrun stdio --workers 1` at its
// default log level, as an agent would make them, and the CPU time pyrun
// and its worker spend per call.
func benchStdio(ctx context.Context, o *opts) (sample, sample, cpuReport, error) {
	if o.profileDir != "" {
		path, err := filepath.Abs(filepath.Join(o.profileDir, "pyrun-stdio.pprof"))
		if err != nil {
			return sample{}, sample{}, cpuReport{}, err
		}
		os.Setenv("PYRUN_CPU_PROFILE", path)
		defer os.Unsetenv("PYRUN_CPU_PROFILE")
		defer progress("Go CPU profile of pyrun stdio: go tool pprof -top %s %s", o.bin, path)
	}
	p, err := startPyrun(ctx, o, "info", "--workers", "1")
	if err != nil {
		return sample{}, sample{}, cpuReport{}, err
	}
	defer p.close()
	// CPU time of pyrun and of its worker over the measured calls, and the
	// part of each call in pyrun's pool (the result's duration_ms: from the
	// request written to the worker to its result read), which against the
	// supervisor tier's round trip tells pyrun's pool from its MCP layer.
	var cpu cpuReport
	var before [2]time.Duration
	var inPool sample
	s, err := measure(o.n, o.warmup, func(i int) error {
		if i == o.warmup {
			before = p.cpu()
		}
		res, err := p.call(ctx, code, nil)
		if err == nil && i >= o.warmup {
			if sc, ok := res.StructuredContent.(map[string]any); ok {
				if ms, ok := sc["duration_ms"].(float64); ok {
					inPool.durations = append(inPool.durations, time.Duration(ms*float64(time.Millisecond)))
				}
			}
		}
		return err
	})
	if err == nil {
		after := p.cpu()
		cpu = cpuReport{PyrunUS: perCallUS(after[0]-before[0], o.n), WorkerUS: perCallUS(after[1]-before[1], o.n)}
	}
	inPool.wall = s.wall
	return s, inPool, cpu, err
}

// cpu is the CPU time used so far by pyrun and by its workers.
func (p *pyrunProc) cpu() [2]time.Duration {
	var t [2]time.Duration
	t[0], _ = cpuTime(p.cmd.Process.Pid)
	for _, pid := range p.workers() {
		d, _ := cpuTime(pid)
		t[1] += d
	}
	return t
}

// benchHTTP measures tool calls against `pyrun serve --workers 1` over one
// of its HTTP transports, at its default log level.
func benchHTTP(ctx context.Context, o *opts, transport string) (sample, error) {
	p, stop, err := startServe(ctx, o, transport, "--workers", "1")
	if err != nil {
		return sample{}, err
	}
	defer stop()
	return measure(o.n, o.warmup, func(int) error {
		_, err := p.call(ctx, code, nil)
		return err
	})
}

// ---- starts ------------------------------------------------------------------

// benchSpawn times `pyrun stdio` from process start to the first result,
// with the default pool size, and splits each run (spawnParts).
func benchSpawn(ctx context.Context, o *opts) (*series, *spawnParts, error) {
	var ds []time.Duration
	var parts []spawnRun
	for range o.runs {
		p, err := startPyrun(ctx, o, "debug")
		if err != nil {
			return nil, nil, err
		}
		handshake := time.Since(p.started)
		_, err = p.call(ctx, code, nil)
		d := time.Since(p.started)
		run, perr := p.spawnRun(handshake, d)
		p.close()
		if err != nil {
			return nil, nil, err
		}
		if perr != nil {
			return nil, nil, perr
		}
		ds = append(ds, d)
		parts = append(parts, run)
	}
	return newSeries(ds), summarizeSpawn(parts), nil
}

// benchPoolReady times `pyrun stdio --workers n` (and extra flags) from
// process start until n workers are ready, from pyrun's log.
func benchPoolReady(ctx context.Context, o *opts, n int, extra []string) (*series, error) {
	var ds []time.Duration
	for range o.runs {
		p, err := startPyrun(ctx, o, "debug", append([]string{"--workers", fmt.Sprint(n)}, extra...)...)
		if err != nil {
			return nil, err
		}
		err = p.log.waitAlive(ctx, n)
		var d time.Duration
		if err == nil {
			p.log.mu.Lock()
			d = p.log.ready[n-1].Sub(p.started)
			p.log.mu.Unlock()
		}
		p.close()
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return newSeries(ds), nil
}

// benchReplace kills an idle worker of a two-worker pool with SIGKILL and
// times until its replacement is ready, from pyrun's log.
func benchReplace(ctx context.Context, o *opts) (*series, error) {
	p, err := startPyrun(ctx, o, "debug", "--workers", "2")
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	var ds []time.Duration
	for i := range o.runs {
		pids := p.workers()
		if len(pids) == 0 {
			return nil, fmt.Errorf("no worker processes found under pid %d", p.cmd.Process.Pid)
		}
		p.log.mu.Lock()
		before := len(p.log.ready)
		p.log.mu.Unlock()
		killed := time.Now()
		if err := kill(pids[i%len(pids)]); err != nil {
			return nil, err
		}
		if err := p.log.waitFor(ctx, "the replacement", func(ready, _ []time.Time) bool { return len(ready) > before }); err != nil {
			return nil, err
		}
		p.log.mu.Lock()
		ds = append(ds, p.log.ready[before].Sub(killed))
		p.log.mu.Unlock()
		if err := p.log.waitAlive(ctx, 2); err != nil {
			return nil, err
		}
	}
	return newSeries(ds), nil
}

// ---- throughput ---------------------------------------------------------------

// cpuCode spins for 50 ms of wall time, prints its token three times and
// returns it.
const cpuCode = `import time
t = time.perf_counter()
while time.perf_counter() - t < 0.05:
    pass
for _ in range(3):
    print(TOKEN)
TOKEN`

// benchThroughput runs calls of cpuCode from 8 concurrent clients of one
// session on a two-worker pool, and checks that every call got its own
// output and value.
func benchThroughput(ctx context.Context, o *opts) (*throughputReport, error) {
	p, err := startPyrun(ctx, o, "debug", "--workers", "2")
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	var next, mixed atomic.Int64
	var mu sync.Mutex
	var errs []error
	var ds []time.Duration
	work := func(calls int64) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > calls {
						return
					}
					token := fmt.Sprintf("token-%06d", i)
					t0 := time.Now()
					res, err := p.call(ctx, cpuCode, map[string]any{"TOKEN": token})
					d := time.Since(t0)
					mu.Lock()
					ds = append(ds, d)
					if err != nil {
						errs = append(errs, err)
					}
					mu.Unlock()
					if err == nil && !ownOutput(res, token) {
						mixed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	work(16) // warm both workers
	next.Store(0)
	mixed.Store(0)
	ds, errs = nil, nil
	began := time.Now()
	work(int64(o.cpuCalls))
	wall := time.Since(began)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d of %d calls failed; the first: %w", len(errs), o.cpuCalls, errs[0])
	}
	s := newSeries(ds)
	return &throughputReport{
		Calls: o.cpuCalls, Concurrency: 8, Workers: 2,
		CallsPerS: round1(float64(o.cpuCalls) / wall.Seconds()),
		Mixed:     mixed.Load(), P50MS: s.P50MS, P99MS: s.P99MS,
	}, nil
}

// ownOutput reports whether a cpuCode result holds its own token, and
// only it, in its output and return value.
func ownOutput(res *sdk.CallToolResult, token string) bool {
	sc, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return false
	}
	want := strings.Repeat(token+"\n", 3)
	return sc["stdout"] == want && sc["stderr"] == "" && sc["return_value"] == token &&
		strings.Contains(contentText(res), want)
}

// ---- --isolation process --------------------------------------------------------

// benchProcess measures --isolation process on two workers: calls per
// second from two concurrent clients for procCalls calls, and the latency
// of a call that finds a spare worker waiting.
func benchProcess(ctx context.Context, o *opts) (*processReport, error) {
	p, err := startPyrun(ctx, o, "debug", "--workers", "2", "--isolation", "process")
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	// A call that finds a spare: wait until the pool is whole each time.
	var spare []time.Duration
	for range o.runs {
		if err := p.log.waitAlive(ctx, 2); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := p.call(ctx, code, nil); err != nil {
			return nil, err
		}
		spare = append(spare, time.Since(t0))
	}
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	var next atomic.Int64
	var mu sync.Mutex
	var ds []time.Duration
	var firstErr error
	began := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for next.Add(1) <= int64(o.procCalls) {
				t0 := time.Now()
				_, err := p.call(ctx, code, nil)
				mu.Lock()
				ds = append(ds, time.Since(t0))
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)
	if firstErr != nil {
		return nil, firstErr
	}
	s, sp := newSeries(ds), newSeries(spare)
	return &processReport{
		Calls: o.procCalls, Concurrency: 2, Workers: 2,
		CallsPerS: round1(float64(o.procCalls) / wall.Seconds()),
		P50MS:     s.P50MS, P90MS: s.P90MS,
		SpareP50MS: sp.P50MS, SpareRuns: len(spare),
	}, nil
}

// ---- memory ----------------------------------------------------------------------

// benchMemory starts a two-worker pool, makes a few calls, lets it idle
// and reads the resident (RSS) and proportional (PSS: shared pages split
// between the processes that map them) set sizes of pyrun and its workers.
func benchMemory(ctx context.Context, o *opts) (*memoryReport, error) {
	p, err := startPyrun(ctx, o, "debug", "--workers", "2")
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	for range 20 {
		if _, err := p.call(ctx, code, nil); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second) // idle, as the measurement asks
	m := &memoryReport{}
	rss, pss, err := memory(p.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	m.PyrunRSSMB, m.PyrunPSSMB = mb(rss), mb(pss)
	m.TotalRSSMB, m.TotalPSSMB = mb(rss), mb(pss)
	for _, pid := range p.workers() {
		rss, pss, err := memory(pid)
		if err != nil {
			return nil, err
		}
		m.Workers++
		m.WorkerRSSMB = append(m.WorkerRSSMB, mb(rss))
		m.TotalRSSMB = round1(m.TotalRSSMB + mb(rss))
		m.TotalPSSMB = round1(m.TotalPSSMB + mb(pss))
	}
	if m.Workers != 2 {
		return nil, fmt.Errorf("found %d worker processes, want 2", m.Workers)
	}
	return m, nil
}

// mb is bytes in megabytes (10^6), the unit of the targets.
func mb(b int64) float64 { return round1(float64(b) / 1e6) }

// ---- statistics ------------------------------------------------------------------

// stats summarises warm calls; times are in milliseconds.
type stats struct {
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
	CallsPerSec float64 `json:"calls_per_s"`
}

func summarize(s sample) stats {
	d := slices.Clone(s.durations)
	slices.Sort(d)
	return stats{
		P50:         ms(percentile(d, 0.50)),
		P90:         ms(percentile(d, 0.90)),
		P99:         ms(percentile(d, 0.99)),
		Max:         ms(d[len(d)-1]),
		CallsPerSec: math.Round(float64(len(d)) / s.wall.Seconds()),
	}
}

type ratio struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

func ratios(a, floor stats) ratio {
	return ratio{P50: round2(a.P50 / floor.P50), P99: round2(a.P99 / floor.P99)}
}

// series summarises a handful of repeated measurements.
type series struct {
	Runs   int       `json:"runs"`
	P50MS  float64   `json:"p50_ms"`
	P90MS  float64   `json:"p90_ms"`
	P99MS  float64   `json:"p99_ms"`
	MinMS  float64   `json:"min_ms"`
	MaxMS  float64   `json:"max_ms"`
	EachMS []float64 `json:"each_ms,omitempty"`
}

func newSeries(ds []time.Duration) *series {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	s := &series{
		Runs: len(ds), P50MS: ms(percentile(sorted, 0.5)), P90MS: ms(percentile(sorted, 0.9)),
		P99MS: ms(percentile(sorted, 0.99)), MinMS: ms(sorted[0]), MaxMS: ms(sorted[len(sorted)-1]),
	}
	if len(ds) <= 20 {
		for _, d := range ds {
			s.EachMS = append(s.EachMS, ms(d))
		}
	}
	return s
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
func round1(x float64) float64   { return math.Round(x*10) / 10 }
func round2(x float64) float64   { return math.Round(x*100) / 100 }
func round3(x float64) float64   { return math.Round(x*1000) / 1000 }

// ---- the machine -------------------------------------------------------------------

type machineInfo struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	MemGiB int64  `json:"mem_gib"`
	Go     string `json:"go"`
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if total, err := procField("/proc/meminfo", "MemTotal:"); err == nil {
		m.MemGiB = int64(math.Round(float64(total) / (1 << 30)))
	}
	return m
}

// loadAverage is the one-minute load average: figures taken while other
// work shares the CPUs are slower and noisier.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

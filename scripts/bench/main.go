//go:build unix

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
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/pyrunserve"
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
	// The reference, mcp-run-python (reference.go).
	reference      string
	referenceCache string
}

// measurements, in the order they run.
var measurements = []string{"warm", "http", "spawn", "local", "pool", "preload", "replace", "throughput", "process", "memory", "agent", "toolcall", "firstcalls", "reuse", "clients", "sessions", "languages", "tsclient", "wall", "checkpoint", "reference", "lb"}

// byDefault are the measurements a plain run makes: lb needs nginx and two
// cores to itself, so it runs only when asked for (-only lb); reference
// needs a checkout of the reference (-reference DIR), and runs with it.
var byDefault = slices.DeleteFunc(slices.Clone(measurements), func(m string) bool { return m == "lb" || m == "reference" })

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
	flag.StringVar(&o.reference, "reference", "", "a checkout of pydantic/mcp-run-python at v0.0.22, built (README.md in this folder): measure it beside pyrun")
	flag.StringVar(&o.referenceCache, "reference-cache", filepath.Join(os.TempDir(), "pyrun-bench-reference"), "where the reference's copy, its node_modules and Deno's cache go")
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
	if o.reference != "" {
		o.only["reference"] = true
	} else if o.only["reference"] {
		fail(errors.New("-only reference needs -reference DIR, a checkout of the reference"))
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
		progress("building pyrun")
		if o.bin, err = pyrunserve.Build(ctx, dir, os.Stderr); err != nil {
			return err
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
		{"local", fmt.Sprintf("pyrun stdio attached to a service against one with its own pool, spawn to first result, %d runs", o.runs),
			func(ctx context.Context) (err error) {
				floor := 0.0
				if rep.Warm != nil {
					floor = rep.Warm.Floor.P50
				} else {
					s, _, err := benchFloor(ctx, rt, code, "1\n", 500, 100)
					if err != nil {
						return fmt.Errorf("floor: %w", err)
					}
					floor = summarize(s).P50
				}
				rep.Local, err = benchLocal(ctx, o, floor)
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
		{"agent", fmt.Sprintf("agent run: %d blocks in one Python session against a stateless replay, fresh and settled (%d runs)", len(agentBlocks), agentRuns),
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
		{"clients", fmt.Sprintf("two clients alternating warm calls on a two-worker pool against one alone, %d calls each", o.n),
			func(ctx context.Context) (err error) {
				rep.Clients, err = benchClients(ctx, rt, o.n, o.warmup)
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
		{"sessions", "Python sessions on shared session workers over stdio --workers 2: 20 \"new\" against 20 warm calls, then 100 open sessions and their memory", func(ctx context.Context) (err error) {
			rep.Sessions, err = benchSessions(ctx, o)
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
		{"wall", fmt.Sprintf("the OS sandbox: one-worker pools with --os-sandbox off and auto, network public and none, %d runs", o.runs),
			func(ctx context.Context) (err error) {
				rep.Wall, err = benchWall(ctx, rt, o.runs, o.n, o.warmup)
				return err
			}},
		{"checkpoint", fmt.Sprintf("durable sessions: %d back-to-back session calls with checkpoints off and on, restore after a worker's death, checkpoint sizes", o.n),
			func(ctx context.Context) (err error) {
				rep.Checkpoint, err = benchCheckpoint(ctx, rt, o.n)
				return err
			}},
		{"reference", fmt.Sprintf("mcp-run-python 0.0.22 at %s beside pyrun: cold start, warm calls, the agent run, %d runs", o.reference, o.runs),
			func(ctx context.Context) error {
				rep.Reference = benchReference(ctx, rt, o)
				return nil
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

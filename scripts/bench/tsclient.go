//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// tsCode is what the tsclient tier's warm calls run, as in issue 13's
// table, and tsWant the JSON of its return_value.
const (
	tsCode = "1 + 1"
	tsWant = "2"
)

// tsclientReport is pyrun measured from the MCP TypeScript SDK's client
// over stdio (tsclient/bench.mjs, on `pyrun stdio --workers 1`), the
// client issue 13's targets are set on, against the floor run with the
// same code in the same run.
type tsclientReport struct {
	Node string `json:"node"`
	SDK  string `json:"sdk"`
	Code string `json:"code"`
	Runs int    `json:"runs"`
	// Spawn is from spawning pyrun to the first result (connect, the
	// handshake, tools/list, the call), one per fresh server.
	Spawn *series `json:"spawn_to_first_result"`
	// FreshMS is the median over the fresh servers of the median of each
	// one's first 20 calls after that first result; FreshEachMS each.
	FreshMS     float64   `json:"fresh_first20_ms"`
	FreshEachMS []float64 `json:"fresh_first20_each_ms"`
	// FreshOverSettled is FreshMS over the settled p50.
	FreshOverSettled float64 `json:"fresh_first20_over_settled"`
	// Settled is -n calls (rounded up to whole rounds) on one server after
	// -warmup calls.
	Settled      stats   `json:"settled"`
	SettledCalls int     `json:"settled_calls"`
	SettledAfter int     `json:"settled_after"`
	ClientCPUUS  float64 `json:"settled_client_cpu_per_call_us"`
	// Floor is the bare Deno+Pyodide round trip of the same code, its calls
	// in turns with the settled ones (a block of each per round), so that
	// both see the same load. Each round's p50s too, and their ratio.
	Floor                stats     `json:"floor"`
	SettledOverFloor     ratio     `json:"settled_over_floor"`
	SettledEachMS        []float64 `json:"settled_p50_each_round_ms"`
	FloorEachMS          []float64 `json:"floor_p50_each_round_ms"`
	ConstServerEachMS    []float64 `json:"const_server_p50_each_round_ms"`
	SettledOverFloorEach []float64 `json:"settled_over_floor_each_round"`
	// ConstServer is the client's floor: the same calls to a stdio server
	// (tsclient/constserver.mjs, no SDK) that answers each at once with a
	// line prepared from pyrun's result: the client and the pipes alone.
	ConstServer            stats   `json:"const_server"`
	ConstServerClientCPUUS float64 `json:"const_server_client_cpu_per_call_us"`
	ConstServerOverFloor   ratio   `json:"const_server_over_floor"`
	// AgentFresh is the agent run as the first thing a fresh server does
	// after its first result; AgentSettled, on the settled server.
	AgentFresh   tsAgent `json:"agent_fresh"`
	AgentSettled tsAgent `json:"agent_settled"`
}

// tsAgent is the medians of the agent runs: replayed statelessly, and in
// one session, its start (the "new" call) on its own too.
type tsAgent struct {
	ReplayMS       float64 `json:"replay_ms"`
	SessionMS      float64 `json:"session_ms"`
	SessionStartMS float64 `json:"session_start_ms"`
	SessionRestMS  float64 `json:"session_rest_ms"`
}

// tsRaw is what bench.mjs prints: every time in milliseconds.
type tsRaw struct {
	Node         string      `json:"node"`
	SDK          string      `json:"sdk"`
	SpawnMS      []float64   `json:"spawn_ms"`
	FreshMS      [][]float64 `json:"fresh_ms"`
	Settled      tsCalls     `json:"settled"`
	ConstServer  tsCalls     `json:"const_server"`
	AgentFresh   []tsAgentMS `json:"agent_fresh"`
	AgentSettled []tsAgentMS `json:"agent_settled"`
}

// tsCalls is a series of timed warm calls, and the client's CPU time
// (Node's, all its threads) per call.
type tsCalls struct {
	MS          []float64 `json:"ms"`
	WallMS      float64   `json:"wall_ms"`
	ClientCPUUS float64   `json:"client_cpu_us"`
}

func (c tsCalls) stats() stats {
	return summarize(sample{durations: durations(c.MS), wall: msDuration(c.WallMS)})
}

type tsAgentMS struct {
	ReplayMS       float64 `json:"replay_ms"`
	SessionMS      float64 `json:"session_ms"`
	SessionStartMS float64 `json:"session_start_ms"`
}

// tsclientDir is scripts/bench/tsclient, with its pinned packages
// installed (npm ci) if they are not there yet, as toolcall.go does for
// its servers.
func tsclientDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module: %w", err)
	}
	dir := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "scripts", "bench", "tsclient")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return dir, nil
	}
	progress("installing the TypeScript SDK (npm ci in %s)", dir)
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm ci: %w", err)
	}
	return dir, nil
}

// tsRounds is how many turns the settled calls and the floor's take.
const tsRounds = 5

// benchTSClient runs bench.mjs against `pyrun stdio --workers 1`, runs the
// floor's calls of tsCode in the rounds it asks for, and summarises what
// both timed.
func benchTSClient(ctx context.Context, rt *supervisor.Runtime, o *opts) (*tsclientReport, error) {
	dir, err := tsclientDir(ctx)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, err
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return nil, err
	}
	block := (o.n + tsRounds - 1) / tsRounds
	floor, stopFloor, err := startFloor(ctx, rt)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	defer stopFloor()
	id := 0
	floorCalls := func(n int) ([]time.Duration, error) {
		ds := make([]time.Duration, n)
		for i := range ds {
			id++
			t0 := time.Now()
			out, err := floor.call(id, tsCode)
			ds[i] = time.Since(t0)
			if err == nil && out != "" {
				err = fmt.Errorf("floor printed %q", out)
			}
			if err != nil {
				return nil, fmt.Errorf("floor: %w", err)
			}
		}
		return ds, nil
	}
	if _, err := floorCalls(o.warmup); err != nil {
		return nil, err
	}

	cfg, err := json.Marshal(map[string]any{
		"command": bin, "args": []string{"stdio", "--attach", "never", "--workers", "1", "--runtime-dir", o.runtimeDir},
		"runs": o.runs, "rounds": tsRounds, "block": block, "warmup": o.warmup, "first": firstCalls,
		"code": tsCode, "want": tsWant, "blocks": agentBlocks, "expected": agentExpected,
	})
	if err != nil {
		return nil, err
	}
	progress("tsclient: %d fresh servers (and one not counted), then %d rounds of %d calls after %d, taking turns with the floor's",
		o.runs, tsRounds, block, o.warmup)
	began := time.Now()
	defer func() { progress("tsclient: %.1f s", time.Since(began).Seconds()) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "bench.mjs"), string(cfg))
	cmd.Dir = dir
	// pyrun inherits Node's stderr (the SDK's default), so its log lines
	// and Node's errors end here; the last of them explain a failure.
	lw := newLogWatcher()
	cmd.Stderr = lw
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start bench.mjs: %w", err)
	}
	var floorDs []time.Duration
	var floorWall time.Duration
	var last []byte
	rd := bufio.NewReader(stdout)
	for {
		line, rerr := rd.ReadBytes('\n')
		if bytes.Equal(bytes.TrimSpace(line), []byte(`{"floor":true}`)) {
			t0 := time.Now()
			ds, err := floorCalls(block)
			if err != nil {
				cancel()
				_ = cmd.Wait()
				return nil, err
			}
			floorWall += time.Since(t0)
			floorDs = append(floorDs, ds...)
			if _, err := stdin.Write([]byte("ok\n")); err != nil {
				cancel()
				_ = cmd.Wait()
				return nil, fmt.Errorf("bench.mjs: %w\n%s", err, lw.tail())
			}
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			last = line
		}
		if rerr != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("bench.mjs: %w\n%s", err, lw.tail())
	}
	var raw tsRaw
	if err := json.Unmarshal(last, &raw); err != nil {
		return nil, fmt.Errorf("bench.mjs's report %.200q: %w", last, err)
	}
	n := tsRounds * block
	if len(raw.SpawnMS) != o.runs || len(raw.FreshMS) != o.runs || len(raw.Settled.MS) != n || len(raw.ConstServer.MS) != n ||
		len(floorDs) != n || len(raw.AgentFresh) != o.runs || len(raw.AgentSettled) != o.runs {
		return nil, fmt.Errorf("bench.mjs's report has %d spawns, %d fresh servers, %d+%d settled calls (%d of the floor's), %d+%d agent runs; want %d, %d, %d+%d (%d), %d+%d",
			len(raw.SpawnMS), len(raw.FreshMS), len(raw.Settled.MS), len(raw.ConstServer.MS), len(floorDs), len(raw.AgentFresh), len(raw.AgentSettled),
			o.runs, o.runs, n, n, n, o.runs, o.runs)
	}

	r := &tsclientReport{
		Node: raw.Node, SDK: raw.SDK, Code: tsCode, Runs: o.runs,
		Spawn:        newSeries(durations(raw.SpawnMS)),
		Settled:      raw.Settled.stats(),
		SettledCalls: n, SettledAfter: o.warmup,
		ClientCPUUS: round1(raw.Settled.ClientCPUUS),
		Floor:       summarize(sample{durations: floorDs, wall: floorWall}),
		ConstServer: raw.ConstServer.stats(), ConstServerClientCPUUS: round1(raw.ConstServer.ClientCPUUS),
	}
	var fresh []time.Duration
	for _, run := range raw.FreshMS {
		m := median(durations(run))
		fresh = append(fresh, m)
		r.FreshEachMS = append(r.FreshEachMS, round3(ms(m)))
	}
	r.FreshMS = round3(ms(median(fresh)))
	r.SettledOverFloor = ratios(r.Settled, r.Floor)
	for i := range tsRounds {
		sm := median(durations(raw.Settled.MS[i*block : (i+1)*block]))
		fm := median(floorDs[i*block : (i+1)*block])
		r.SettledEachMS, r.FloorEachMS = append(r.SettledEachMS, round3(ms(sm))), append(r.FloorEachMS, round3(ms(fm)))
		r.SettledOverFloorEach = append(r.SettledOverFloorEach, round2(float64(sm)/float64(fm)))
		r.ConstServerEachMS = append(r.ConstServerEachMS, round3(ms(median(durations(raw.ConstServer.MS[i*block:(i+1)*block])))))
	}
	r.ConstServerOverFloor = ratios(r.ConstServer, r.Floor)
	r.FreshOverSettled = round2(r.FreshMS / r.Settled.P50)
	r.AgentFresh, r.AgentSettled = tsAgentMedians(raw.AgentFresh), tsAgentMedians(raw.AgentSettled)
	return r, nil
}

func tsAgentMedians(runs []tsAgentMS) tsAgent {
	var replay, sess, start, rest []time.Duration
	for _, a := range runs {
		replay = append(replay, msDuration(a.ReplayMS))
		sess = append(sess, msDuration(a.SessionMS))
		start = append(start, msDuration(a.SessionStartMS))
		rest = append(rest, msDuration(a.SessionMS-a.SessionStartMS))
	}
	med := func(ds []time.Duration) float64 { return round1(ms(median(ds))) }
	return tsAgent{ReplayMS: med(replay), SessionMS: med(sess), SessionStartMS: med(start), SessionRestMS: med(rest)}
}

func msDuration(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func durations(xs []float64) []time.Duration {
	ds := make([]time.Duration, len(xs))
	for i, x := range xs {
		ds[i] = msDuration(x)
	}
	return ds
}

// issue13 is issue 13's table (the TypeScript SDK client, stdio, 1 + 1, on
// this 2-core machine), printed next to this run's figures.
var issue13 = []struct{ figure, pyrun, reference string }{
	{"spawn to first result", "250 ms", "1,460-1,490 ms"},
	{"warm call, fresh server", "1.60-1.74 ms", "1.34-1.41 ms"},
	{"warm call, after ~200 calls", "1.01-1.02 ms", "1.00-1.05 ms"},
	{"agent run, replayed", "37-43 ms fresh, 17 settled", "18 ms fresh, 14 settled"},
	{"agent run, in a session", "", ""},
}

func printTSClient(w io.Writer, t *tsclientReport) {
	fmt.Fprintf(w, "\nthe TypeScript SDK client (@modelcontextprotocol/sdk %s, Node %s) on pyrun stdio --workers 1, %s; issue 13's figures beside\n",
		t.SDK, t.Node, t.Code)
	const row = "  %-28s %-36s %-27s %-24s %s\n"
	fmt.Fprintf(w, row, "", "this run", "issue 13: pyrun", "mcp-run-python 0.0.22", "target")
	got := []struct{ v, target string }{
		{fmt.Sprintf("%.3f s (median of %d)", t.Spawn.P50MS/1000, t.Spawn.Runs), "<= 0.15 s"},
		{fmt.Sprintf("%.3f ms (calls 1-%d, median)", t.FreshMS, firstCalls), fmt.Sprintf("<= 1.2x settled: %.2fx", t.FreshOverSettled)},
		{fmt.Sprintf("p50 %.3f ms, p99 %.3f ms", t.Settled.P50, t.Settled.P99), fmt.Sprintf("<= 1.3x floor: %.2fx", t.SettledOverFloor.P50)},
		{fmt.Sprintf("%.1f ms fresh, %.1f settled", t.AgentFresh.ReplayMS, t.AgentSettled.ReplayMS), ""},
		{fmt.Sprintf("%.0f / %.0f ms (start %.0f / %.0f)", t.AgentFresh.SessionMS, t.AgentSettled.SessionMS,
			t.AgentFresh.SessionStartMS, t.AgentSettled.SessionStartMS), ""},
	}
	for i, ref := range issue13 {
		fmt.Fprintf(w, row, ref.figure, got[i].v, ref.pyrun, ref.reference, got[i].target)
	}
	fmt.Fprintf(w, "  the session's nine calls after its start: %.1f ms fresh, %.1f settled\n", t.AgentFresh.SessionRestMS, t.AgentSettled.SessionRestMS)
	fmt.Fprintf(w, "  floor (bare Deno+Pyodide, %s, in turns with the settled calls): p50 %.3f ms, p99 %.3f ms\n", t.Code, t.Floor.P50, t.Floor.P99)
	fmt.Fprintf(w, "  per round of %d calls, p50: settled %v ms, floor %v ms, ratio %v; the client's floor %v ms\n",
		t.SettledCalls/max(len(t.SettledEachMS), 1), t.SettledEachMS, t.FloorEachMS, t.SettledOverFloorEach, t.ConstServerEachMS)
	fmt.Fprintf(w, "  each fresh server's calls 1-%d, median: %v ms\n", firstCalls, t.FreshEachMS)
	fmt.Fprintf(w, "  the client's floor (the same calls to a server answering at once with a prepared line): p50 %.3f ms, p99 %.3f ms, %.2fx the floor's p50\n",
		t.ConstServer.P50, t.ConstServer.P99, t.ConstServerOverFloor.P50)
	fmt.Fprintf(w, "  the client's CPU per call (Node): %.0f us to pyrun, %.0f us to that server\n", t.ClientCPUUS, t.ConstServerClientCPUUS)
}

// Command bench measures the latency of a warm pyrun tool call and compares
// it with the floor pyrun is built on.
//
// Run it from anywhere inside the module:
//
//	go run ./scripts/bench -n 2000
//	go run ./scripts/bench -pyrun /tmp/pyrun -n 5000 -workers 2
//
// It measures two things, one after the other, each with -warmup calls first
// (not counted) and then -n sequential calls of `print(1)`:
//
//   - pyrun: the run_python_code tool called by the go-sdk MCP client over
//     stdio, against `pyrun stdio` (the -pyrun binary, or one built from
//     ./cmd/pyrun into a temporary folder). This is what an agent sees: JSON-RPC
//     both ways, argument checks, the pool, the worker round trip, formatting,
//     and pyrun's per-call log line.
//   - floor: the same code run by the supervisor package directly on a pool of
//     one worker (supervisor.Provision, supervisor.NewPool, pool.Run), without
//     MCP: the bare Deno+Pyodide round trip pyrun cannot go below.
//
// It prints p50, p90, p99, max and calls per second for both as a table, then
// pyrun's p50 and p99 as multiples of the floor's, then everything again as
// one JSON line for scripts. The runtime (Deno and Pyodide) comes from pyrun's
// default runtime folder and is installed there on first use.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// code is what every measured call runs.
const code = "print(1)"

func main() {
	n := flag.Int("n", 2000, "measured calls per target")
	warmup := flag.Int("warmup", 200, "calls before measuring, not counted")
	bin := flag.String("pyrun", "", "pyrun binary to measure (default: build ./cmd/pyrun into a temporary folder)")
	workers := flag.Int("workers", 1, "pyrun's --workers; the calls are sequential, so one is enough")
	flag.Parse()
	if *n < 1 || *warmup < 0 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n and -workers must be at least 1, -warmup at least 0")
		os.Exit(2)
	}
	if err := run(context.Background(), *bin, *n, *warmup, *workers); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin string, n, warmup, workers int) error {
	if bin == "" {
		dir, err := os.MkdirTemp("", "pyrun-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "pyrun")
		fmt.Fprintln(os.Stderr, "building pyrun ...")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pyrun/pyrun/cmd/pyrun")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build pyrun: %w", err)
		}
	}

	fmt.Fprintf(os.Stderr, "pyrun: %d warm-up calls, then %d measured calls over MCP stdio ...\n", warmup, n)
	viaMCP, err := benchMCP(ctx, bin, workers, n, warmup)
	if err != nil {
		return fmt.Errorf("pyrun: %w", err)
	}
	fmt.Fprintf(os.Stderr, "floor: %d warm-up calls, then %d measured calls on the supervisor ...\n", warmup, n)
	floor, err := benchFloor(ctx, n, warmup)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}

	rep := report{
		N: n, Warmup: warmup, Workers: workers, Code: code,
		Pyrun: summarize(viaMCP),
		Floor: summarize(floor),
	}
	rep.RatioP50 = round2(rep.Pyrun.P50 / rep.Floor.P50)
	rep.RatioP99 = round2(rep.Pyrun.P99 / rep.Floor.P99)
	rep.print(os.Stdout)
	return nil
}

// sample is one measured series.
type sample struct {
	durations []time.Duration // one per call, in call order
	wall      time.Duration   // the whole series
}

// measure calls call warmup times, then n times timing each.
func measure(n, warmup int, call func(i int) error) (sample, error) {
	for i := range warmup {
		if err := call(i); err != nil {
			return sample{}, fmt.Errorf("warm-up call %d: %w", i, err)
		}
	}
	s := sample{durations: make([]time.Duration, n)}
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

// benchMCP measures tool calls against `pyrun stdio`.
func benchMCP(ctx context.Context, bin string, workers, n, warmup int) (sample, error) {
	stderr := &tail{max: 8 << 10}
	cmd := exec.Command(bin, "stdio", "--workers", fmt.Sprint(workers))
	cmd.Stderr = stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	session, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return sample{}, fmt.Errorf("start %s stdio: %w\n%s", bin, err, stderr)
	}
	defer session.Close()

	params := &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": code}}
	s, err := measure(n, warmup, func(int) error {
		res, err := session.CallTool(ctx, params)
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("tool error: %s", contentText(res))
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("%w\npyrun's stderr:\n%s", err, stderr)
	}
	return s, nil
}

func contentText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// benchFloor measures the same call on the supervisor's pool directly.
func benchFloor(ctx context.Context, n, warmup int) (sample, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "floor", Level: hclog.Warn, Output: os.Stderr})
	rt, err := supervisor.Provision(ctx, supervisor.DefaultRuntimeRoot(), os.Stderr, log)
	if err != nil {
		return sample{}, err
	}
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, log)
	if err != nil {
		return sample{}, err
	}
	defer pool.Close(ctx)

	return measure(n, warmup, func(i int) error {
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		if err != nil {
			return err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
		}
		return nil
	})
}

// stats summarises one series; times are in milliseconds.
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

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// report is the benchmark's outcome; its JSON form is the last line printed.
type report struct {
	N        int     `json:"n"`
	Warmup   int     `json:"warmup"`
	Workers  int     `json:"workers"`
	Code     string  `json:"code"`
	Pyrun    stats   `json:"pyrun"`
	Floor    stats   `json:"floor"`
	RatioP50 float64 `json:"pyrun_over_floor_p50"`
	RatioP99 float64 `json:"pyrun_over_floor_p99"`
}

func (r report) print(w io.Writer) {
	const row = "%-28s %6v %8v %8v %8v %8v %8v\n"
	fmt.Fprintf(w, row, "", "calls", "p50 ms", "p90 ms", "p99 ms", "max ms", "calls/s")
	for _, t := range []struct {
		name string
		s    stats
	}{{"pyrun (MCP over stdio)", r.Pyrun}, {"floor (supervisor, no MCP)", r.Floor}} {
		fmt.Fprintf(w, row, t.name, r.N, f3(t.s.P50), f3(t.s.P90), f3(t.s.P99), f3(t.s.Max), t.s.CallsPerSec)
	}
	fmt.Fprintf(w, "pyrun / floor: p50 %.2fx, p99 %.2fx\n", r.RatioP50, r.RatioP99)
	line, _ := json.Marshal(r)
	fmt.Fprintln(w, string(line))
}

func f3(x float64) string { return fmt.Sprintf("%.3f", x) }

// tail keeps the last max bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

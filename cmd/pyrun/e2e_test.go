package main

// End-to-end tests: the pyrun binary, built once by TestMain, driven by the
// go-sdk's MCP client over stdio exactly as an agent would drive it, plus the
// `run` and `version` commands as a shell would. They assert what docs/contract.md
// promises (the XML text block, structuredContent, isError, exit codes,
// isolation between calls, limits), not how pyrun does it.
//
// Most cases share one two-worker server, because every worker costs seconds
// of CPU to start; cases that need their own configuration start their own.
// The top-level tests run one after another, in file order, so that the
// timing case measures pyrun and not its neighbours. With -short, they skip.
//
// The runtime (Deno and Pyodide) comes from the default runtime folder and is
// installed there on first use.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/pyrunserve"
	"github.com/pyrun/pyrun/internal/testtier"
)

// pyrunBin is the binary under test; empty with -short.
var pyrunBin string

// callTimeout bounds any one tool call; calls in these tests take at most a
// few seconds, and a hang should fail rather than stall the run.
const callTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	if spec := os.Getenv(envConfine); spec != "" {
		os.Exit(confineAndExec(spec))
	}
	flag.Parse()
	// pyrun stdio attaches to a service on $XDG_RUNTIME_DIR/pyrun.sock (or
	// /run/user/UID/pyrun.sock) when one answers: the tests' own servers
	// must not attach to the user's. An empty runtime folder of their own
	// has no service.
	runtimeDir, err := os.MkdirTemp("", "pyrun-e2e-run-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	os.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	// Python sessions keep checkpoints in $XDG_STATE_HOME/pyrun/sessions by
	// default (docs/sessions.md), and keep them when pyrun stops: the
	// tests' go to a folder of their own, removed with it.
	os.Setenv("XDG_STATE_HOME", filepath.Join(runtimeDir, "state"))
	if testing.Short() {
		code := m.Run()
		os.RemoveAll(runtimeDir)
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "pyrun-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	pyrunBin, err = pyrunserve.Build(context.Background(), dir, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.RemoveAll(dir)
		os.RemoveAll(runtimeDir)
		os.Exit(2)
	}
	code := m.Run()
	if err := shared.close(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the shared pyrun stdio server did not exit cleanly: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.RemoveAll(runtimeDir)
	os.Exit(code)
}

// needBinary skips t under -short, where TestMain builds no binary: the
// binary runs the worker runtime.
func needBinary(t *testing.T) {
	t.Helper()
	testtier.Runtime(t)
}

// ---- the tool, on the shared server ----------------------------------------

func TestToolDescription(t *testing.T) {
	s := shared.get(t)
	tools, err := s.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tool *sdk.Tool
	for _, tl := range tools.Tools {
		if tl.Name == "run_python_code" {
			tool = tl
		}
	}
	if tool == nil {
		t.Fatalf("no run_python_code tool among %d tools", len(tools.Tools))
	}
	m := regexp.MustCompile(`Python (3\.\d+\.\d+)`).FindStringSubmatch(tool.Description)
	if m == nil {
		t.Fatalf("the description does not give the exact Python version:\n%s", tool.Description)
	}
	r := s.run(t, "import sys\nsys.version.split()[0]")
	wantValue(t, r, fmt.Sprintf("%q", m[1]))
	for _, word := range []string{"await", "stdout", "stderr"} {
		if !strings.Contains(tool.Description, word) {
			t.Errorf("the description does not mention %q:\n%s", word, tool.Description)
		}
	}
}

func TestPrint(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, `print("hello, world")`)
	wantStatus(t, r, "success")
	if r.sc.Stdout != "hello, world\n" || r.sc.Stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q and nothing", r.sc.Stdout, r.sc.Stderr, "hello, world\n")
	}
	if want := "<status>success</status>\n<output>\nhello, world\n</output>"; r.text != want {
		t.Errorf("text:\n%s\nwant:\n%s", r.text, want)
	}
	if string(r.sc.ReturnValue) != "null" || r.sc.Error != nil || len(r.sc.Dependencies) != 0 {
		t.Errorf("return_value %s, error %v, dependencies %v; want null, null, []", r.sc.ReturnValue, r.sc.Error, r.sc.Dependencies)
	}
}

func TestReturnValue(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct {
		name, code string
		want       string // JSON; "" for no return value
	}{
		{"int", "1 + 2", "3"},
		{"str", `"py" + "run"`, `"pyrun"`},
		{"dict", `{"a": [1, 2.5], "b": None, "c": True}`, `{"a": [1, 2.5], "b": null, "c": true}`},
		{"tuple", "(1, 'x')", `[1, "x"]`},
		{"set", "{3, 1, 2}", "[1, 2, 3]"},
		{"after statements", "x = 20\ny = x + 1\ny * 2", "42"},
		{"None", "None", ""},
		{"assignment", "x = 5", ""},
		{"print", `print("shown")`, ""},
		// The documented conversions of values JSON has no type for.
		{"bytes", `[b"utf-8 text", b"\xff\x00"]`, `["utf-8 text", {"$bytes_base64": "/wA="}]`},
		{"frozenset of mixed types", `sorted(frozenset({1, 2})) + [frozenset({"a"})]`, `[1, 2, ["a"]]`},
		{"dataclass", "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\n    tags: tuple\nP(1, ('a',))", `{"x": 1, "tags": ["a"]}`},
		{"pydantic-like model_dump", "class M:\n    def model_dump(self, mode):\n        return {'mode': mode}\nM()", `{"mode": "json"}`},
		{"numpy-like tolist", "class A:\n    __module__ = 'numpy'\n    def tolist(self):\n        return [[1, 2], [3, 4]]\nA()", `[[1, 2], [3, 4]]`},
		{"dates, decimals, complex, NaN", "import datetime, decimal, math\n[datetime.date(2025, 3, 18), decimal.Decimal('1.10'), 1+2j, math.nan, -math.inf]", `["2025-03-18", "1.10", "(1+2j)", "NaN", "-Infinity"]`},
		{"non-string keys and cycles", "d = {1: 'a', None: 'b'}\nl = [d]\nl.append(l)\nl", `[{"1": "a", "null": "b"}, "<cycle>"]`},
		{"anything else by repr", "class O:\n    def __repr__(self):\n        return '<O>'\nO()", `"<O>"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(t, tc.code)
			if tc.want != "" {
				wantValue(t, r, tc.want)
				return
			}
			wantStatus(t, r, "success")
			if string(r.sc.ReturnValue) != "null" {
				t.Errorf("return_value %s, want null", r.sc.ReturnValue)
			}
			if _, ok := r.sections["return_value"]; ok {
				t.Errorf("a <return_value> section for None:\n%s", r.text)
			}
		})
	}
}

func TestErrorTraceback(t *testing.T) {
	s := shared.get(t)
	code := "def divide(a, b):\n    return a / b\n\nprint(\"before\")\ndivide(1, 0)\n"
	r := s.run(t, code)
	wantStatus(t, r, "run-error")
	if r.sc.ExitCode != 1 || !r.isError {
		t.Errorf("exit_code %d, isError %v; want 1, true", r.sc.ExitCode, r.isError)
	}
	if r.sc.Stdout != "before\n" {
		t.Errorf("stdout %q, want the output before the error", r.sc.Stdout)
	}
	tb := *r.sc.Error
	for _, want := range []string{
		"Traceback (most recent call last):",
		`File "main.py", line 5`,
		`File "main.py", line 2, in divide`,
		"ZeroDivisionError: division by zero",
	} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	for _, internal := range []string{"_pyodide", "pyrun_helper", "pyodide/"} {
		if strings.Contains(tb, internal) {
			t.Errorf("traceback shows pyrun's machinery (%q):\n%s", internal, tb)
		}
	}
	if !strings.HasSuffix(tb, "ZeroDivisionError: division by zero") {
		t.Errorf("traceback does not end with the exception:\n%s", tb)
	}

	t.Run("syntax error", func(t *testing.T) {
		r := s.run(t, "x = 1\nif x\n    pass\n")
		wantStatus(t, r, "run-error")
		if e := *r.sc.Error; !strings.Contains(e, "SyntaxError") || !strings.Contains(e, `File "main.py", line 2`) ||
			strings.Contains(e, "pyrun_helper") || strings.Contains(e, "_pyodide") {
			t.Errorf("error:\n%s\nwant a SyntaxError at main.py line 2 without pyrun's frames", e)
		}
	})
}

func TestAsync(t *testing.T) {
	s := shared.get(t)
	code := `import asyncio

async def twice(x):
    await asyncio.sleep(0.05)
    return 2 * x

print("start")
await asyncio.sleep(0.1)
results = await asyncio.gather(twice(1), twice(2))
print("end")
results
`
	r := s.run(t, code)
	wantValue(t, r, "[2, 4]")
	if r.sc.Stdout != "start\nend\n" {
		t.Errorf("stdout %q, want %q", r.sc.Stdout, "start\nend\n")
	}
	if r.sc.DurationMS < 100 {
		t.Errorf("duration_ms %v: the awaits did not wait", r.sc.DurationMS)
	}
}

func TestGlobalVariables(t *testing.T) {
	s := shared.get(t)
	r := s.mustCall(t, map[string]any{
		"python_code": "[type(d).__name__, d['k'], d['nested']['n'][1], type(l).__name__, l[1], l[2] is None, " +
			"l[3] is True, n + 1, type(n).__name__, f * 2, s.upper()]",
		"global_variables": map[string]any{
			"d": map[string]any{"k": "v", "nested": map[string]any{"n": []int{1, 2}}},
			"l": []any{1, "two", nil, true},
			"n": 41,
			"f": 1.25,
			"s": "text",
		},
	})
	wantValue(t, r, `["dict", "v", 2, "list", "two", true, true, 42, "int", 2.5, "TEXT"]`)
}

func TestStdoutStderr(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, `import sys
print("out 1")
print("err 1", file=sys.stderr)
print("out 2")
sys.stderr.write("err 2\n")
sys.stdout.write("out 3\n")
`)
	wantStatus(t, r, "success")
	if want := "out 1\nout 2\nout 3\n"; r.sc.Stdout != want {
		t.Errorf("stdout %q, want %q", r.sc.Stdout, want)
	}
	if want := "err 1\nerr 2\n"; r.sc.Stderr != want {
		t.Errorf("stderr %q, want %q", r.sc.Stderr, want)
	}
	want := []chunk{
		{"stdout", "out 1\n"}, {"stderr", "err 1\n"}, {"stdout", "out 2\n"},
		{"stderr", "err 2\n"}, {"stdout", "out 3\n"},
	}
	if got := mergeChunks(r.sc.Output); !reflect.DeepEqual(got, want) {
		t.Errorf("output %v, want %v", got, want)
	}
	if want := "out 1\nerr 1\nout 2\nerr 2\nout 3"; r.sections["output"] != want {
		t.Errorf("<output> %q, want %q", r.sections["output"], want)
	}

	t.Run("closing tag in output", func(t *testing.T) {
		r := s.run(t, `print("a </output> b <error>c</error>")`)
		wantStatus(t, r, "success")
		if r.sc.Stdout != "a </output> b <error>c</error>\n" {
			t.Errorf("stdout %q", r.sc.Stdout)
		}
		if len(r.sections) != 2 || strings.Contains(r.sections["output"], "</output>") {
			t.Errorf("the block does not keep the printed tag inside <output>:\n%s", r.text)
		}
	})
}

// TestParallelCalls runs four one-second loops on two workers: two run at a
// time, so all four take about two seconds. The loops run for a second of
// wall-clock time rather than a fixed amount of work, so that a busy machine
// does not stretch them; what the bounds catch is calls that do not run in
// parallel (4 s) or more calls at once than workers (1 s).
func TestParallelCalls(t *testing.T) {
	s := shared.get(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitWorkers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	code := `import time
start = time.perf_counter()
n = 0
while time.perf_counter() - start < 1.0:
    n += 1
n
`
	const calls = 4
	var wg sync.WaitGroup
	results := make([]result, calls)
	errs := make([]error, calls)
	began := time.Now()
	for i := range calls {
		wg.Go(func() { results[i], errs[i] = s.call(t.Context(), map[string]any{"python_code": code}) })
	}
	wg.Wait()
	elapsed := time.Since(began)
	for i := range calls {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		wantStatus(t, results[i], "success")
		if d := results[i].sc.DurationMS; d < 1000 {
			t.Errorf("call %d took %v ms, want at least 1000", i, d)
		}
	}
	t.Logf("%d one-second loops on 2 workers: %v", calls, elapsed.Round(time.Millisecond))
	const wantMin, wantMax = 1500 * time.Millisecond, 3500 * time.Millisecond
	if elapsed < wantMin || elapsed > wantMax {
		t.Errorf("%d one-second calls on 2 workers took %v, want between %v and %v", calls, elapsed, wantMin, wantMax)
	}
}

func TestConcurrentOutputsDoNotMix(t *testing.T) {
	s := shared.get(t)
	const calls, lines = 16, 300
	code := `import sys
for i in range(%d):
    print(TOKEN, i, file=sys.stderr if i %% 3 == 0 else sys.stdout)
    if i %% 50 == 0:
        await __import__("asyncio").sleep(0)
TOKEN
`
	var wg sync.WaitGroup
	results := make([]result, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			results[i], errs[i] = s.call(t.Context(), map[string]any{
				"python_code":      fmt.Sprintf(code, lines),
				"global_variables": map[string]any{"TOKEN": fmt.Sprintf("token-%02d", i)},
			})
		})
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil {
			t.Errorf("call %d: %v", i, errs[i])
			continue
		}
		r := results[i]
		token := fmt.Sprintf("token-%02d", i)
		if r.sc.Status != "success" || !jsonEqual(string(r.sc.ReturnValue), fmt.Sprintf("%q", token)) {
			t.Errorf("call %d: status %s, return_value %s; want success, %q", i, r.sc.Status, r.sc.ReturnValue, token)
			continue
		}
		n := 0
		for _, stream := range []string{r.sc.Stdout, r.sc.Stderr} {
			for line := range strings.Lines(stream) {
				n++
				if !strings.HasPrefix(line, token+" ") {
					t.Errorf("call %d (%s) has a foreign line %q", i, token, line)
					break
				}
			}
		}
		if n != lines {
			t.Errorf("call %d has %d lines of output, want %d", i, n, lines)
		}
	}
}

func TestBadArguments(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct {
		name string
		args map[string]any
		want string // the argument the error must name
	}{
		{"missing python_code", map[string]any{}, "python_code"},
		{"python_code not a string", map[string]any{"python_code": 123}, "python_code"},
		{"unknown argument", map[string]any{"python_code": "1", "bogus_arg": 1}, "bogus_arg"},
		{"global_variables a list", map[string]any{"python_code": "1", "global_variables": []int{1, 2}}, "global_variables"},
		{"global_variables a string", map[string]any{"python_code": "1", "global_variables": "x=1"}, "global_variables"},
		{"timeout_seconds a string", map[string]any{"python_code": "1", "timeout_seconds": "soon"}, "timeout_seconds"},
		{"timeout_seconds negative", map[string]any{"python_code": "1", "timeout_seconds": -1}, "timeout_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.callRaw(t.Context(), tc.args)
			if err != nil {
				t.Fatalf("a protocol error, want a tool error: %v", err)
			}
			if !res.IsError {
				t.Fatalf("isError false for %v", tc.args)
			}
			var text strings.Builder
			for _, c := range res.Content {
				if txt, ok := c.(*sdk.TextContent); ok {
					text.WriteString(txt.Text)
				}
			}
			t.Logf("%v: %s", tc.args, text.String())
			if !strings.Contains(text.String(), tc.want) {
				t.Errorf("the error does not name %q: %q", tc.want, text.String())
			}
		})
	}
	// The server is still fine.
	wantValue(t, s.run(t, "1"), "1")
}

func TestTimeout(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct{ name, code string }{
		{"busy loop", "print('before the loop')\nwhile True:\n    pass\n"},
		{"time.sleep", "import time\nprint('before the loop')\ntime.sleep(100)\n"},
		{"asyncio.sleep", "import asyncio\nprint('before the loop')\nawait asyncio.sleep(100)\n"},
		// Python ignores the interrupt: the worker is killed and replaced.
		{"interrupt ignored", "import time\nprint('before the loop')\nwhile True:\n    try:\n        time.sleep(100)\n" +
			"    except KeyboardInterrupt:\n        pass\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			r := s.mustCall(t, map[string]any{"python_code": tc.code, "timeout_seconds": 1})
			elapsed := time.Since(began)
			wantStatus(t, r, "timeout")
			if r.sc.ExitCode != 124 || !r.isError {
				t.Errorf("exit_code %d, isError %v; want 124, true", r.sc.ExitCode, r.isError)
			}
			if r.sc.Stdout != "before the loop\n" {
				t.Errorf("stdout %q, want the output before the loop", r.sc.Stdout)
			}
			if r.sections["output"] != "before the loop" {
				t.Errorf("<output> %q, want the output before the loop", r.sections["output"])
			}
			if elapsed < time.Second || elapsed > 15*time.Second {
				t.Errorf("a call with timeout_seconds=1 took %v", elapsed)
			}
			if strings.Contains(*r.sc.Error, "pyrun_helper") || strings.Contains(*r.sc.Error, "_pyodide") {
				t.Errorf("the error shows pyrun's machinery:\n%s", *r.sc.Error)
			}
			// The next calls work, whichever worker they land on.
			for range 2 {
				r := s.run(t, "print('after')\n6 * 7")
				wantValue(t, r, "42")
				if r.sc.Stdout != "after\n" {
					t.Errorf("the call after a timeout printed %q, want %q", r.sc.Stdout, "after\n")
				}
			}
		})
	}
}

// TestWorkerCrash kills a worker from inside; it runs last on the shared
// server, as the replacement worker costs a start.
func TestWorkerCrash(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, "import js\nprint('goodbye')\njs.Deno.exit(7)\n")
	wantStatus(t, r, "crashed")
	if r.sc.ExitCode != 137 || !r.isError {
		t.Errorf("exit_code %d, isError %v; want 137, true", r.sc.ExitCode, r.isError)
	}
	if r.sc.Stdout != "goodbye\n" {
		t.Errorf("stdout %q, want the output before the crash", r.sc.Stdout)
	}
	// Calls keep working: four at once, so both workers (one of them new
	// or starting) take some.
	var wg sync.WaitGroup
	results := make([]result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = s.call(t.Context(), map[string]any{"python_code": fmt.Sprintf("print(%d)\n%d", i, i)})
		})
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("call %d after the crash: %v", i, errs[i])
		}
		wantValue(t, results[i], fmt.Sprint(i))
	}
	// The crashed worker is replaced.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitWorkers(ctx, 2); err != nil {
		t.Errorf("the crashed worker was not replaced: %v", err)
	}
}

// TestWorkerStderrIsRelogged: what a worker process writes to its own
// stderr (not the call's sys.stderr) reaches pyrun's log, under the
// worker's name, and not the call's output.
func TestWorkerStderrIsRelogged(t *testing.T) {
	s := shared.get(t)
	marker := fmt.Sprintf("relog-marker-%d", time.Now().UnixNano())
	r := s.run(t, "import js\njs.console.error('"+marker+"')")
	wantStatus(t, r, "success")
	if strings.Contains(r.text, marker) {
		t.Errorf("the worker's own stderr reached the call's output:\n%s", r.text)
	}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the marker in pyrun's log", func(c map[string]int) bool { return c[marker] > 0 }); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s.log.tail(), "\n") {
		var rec struct {
			Message string `json:"@message"`
			Module  string `json:"@module"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == marker {
			if !regexp.MustCompile(`^pyrun\.pool\.worker-\d+$`).MatchString(rec.Module) {
				t.Errorf("logged under %q, want the worker's name (pyrun.pool.worker-N)", rec.Module)
			}
			return
		}
	}
	t.Errorf("the marker's log line is not among the last lines:\n%s", s.log.tail())
}

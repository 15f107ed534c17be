package pyodidehost_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testproc"
	"github.com/pyrun/pyrun/supervisor"
)

// The JavaScript engine's worker (js/main.ts), started as its engine
// (supervisor/engine_javascript.go) and the pool's denoArgs start it: reads
// of its own folder and of TypeScript's compiler, the Worker options
// switch, nothing else; same environment and working folder as Python's
// workers. Keep it in step with them.
func jsWorkerCommand(ctx context.Context, rt *supervisor.Runtime, hostConfig string) *exec.Cmd {
	args := denoRun(rt, []string{
		"--unstable-worker-options",
		"--v8-flags=--expose-gc",
		"--allow-read=" + strings.Join([]string{
			filepath.Join(rt.Dir, "js"),
			filepath.Join(rt.Dir, "node_modules", "typescript", "lib", "typescript.js"),
		}, ","),
	}, "js/main.ts", hostConfig)
	return workerProcess(ctx, rt, args)
}

// TestJavaScriptTranscripts replays testdata/js/*.txtar against the real
// JavaScript worker, as TestTranscripts does for Python.
func TestJavaScriptTranscripts(t *testing.T) {
	replayAll(t, filepath.Join("testdata", "js"), jsWorkerCommand)
}

// jsProc is one JavaScript worker driven by a test, for what a transcript
// cannot show: timings and the worker's end.
type jsProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan map[string]any
	stderr *syncbuf.Buffer
}

func startJS(t *testing.T, hostConfig string) *jsProc {
	t.Helper()
	rt := provision(t)
	ctx, cancel := context.WithCancel(t.Context())
	cmd := jsWorkerCommand(ctx, rt, hostConfig)
	p := &jsProc{t: t, cmd: cmd, events: make(chan map[string]any, 64), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = p.stderr
	stdin, stdout := testproc.StartPiped(t, cmd)
	p.stdin = stdin
	go func() {
		defer close(p.events)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := readLine(r)
			if err != nil {
				return
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				p.events <- map[string]any{"type": "garbage", "line": line}
				continue
			}
			p.events <- ev
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	if ev := p.next("ready", 60*time.Second); ev["engine"] != "javascript" {
		t.Fatalf("ready event %v, want engine javascript", ev)
	}
	return p
}

// answer returns the next result or error event, skipping others; nil
// when the worker's stdout ended first.
func (p *jsProc) answer(limit time.Duration) map[string]any {
	p.t.Helper()
	return p.until("answer", limit, func(typ any) bool { return typ == "result" || typ == "error" })
}

// next returns the next event of type typ, skipping others; nil when the
// worker's stdout ended first.
func (p *jsProc) next(typ string, limit time.Duration) map[string]any {
	p.t.Helper()
	return p.until(typ+" event", limit, func(t any) bool { return t == typ })
}

// until returns the next event whose type is wanted, skipping others; nil
// when the worker's stdout ended first.
func (p *jsProc) until(what string, limit time.Duration, wanted func(typ any) bool) map[string]any {
	p.t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				return nil
			}
			if wanted(ev["type"]) {
				return ev
			}
		case <-timer.C:
			p.t.Fatalf("no %s after %s; stderr:\n%s", what, limit, p.stderr.String())
		}
	}
}

func (p *jsProc) send(req string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, req+"\n"); err != nil {
		p.t.Fatalf("write request: %v", err)
	}
}

// A busy loop is answered soon after the signal, with recycle: the
// supervisor then ends the process, the only way to stop the loop.
func TestJavaScriptBusyLoopAnswer(t *testing.T) {
	for _, session := range []bool{false, true} {
		t.Run(fmt.Sprintf("session=%v", session), func(t *testing.T) {
			p := startJS(t, fmt.Sprintf(`{"heap_limit":0,"max_line":1048576,"session":%v}`, session))
			p.send(`{"type":"run","id":"c1","code":"console.log('go');\nwhile (true) {}","max_output":65536,"interrupts":0}`)
			p.next("output", 30*time.Second)
			sent := time.Now()
			if err := p.cmd.Process.Signal(interruptSignal); err != nil {
				t.Fatal(err)
			}
			res := p.next("result", 30*time.Second)
			took := time.Since(sent)
			if res == nil || res["status"] != "interrupted" || res["recycle"] == nil {
				t.Fatalf("result %v, want interrupted with recycle", res)
			}
			// The supervisor's grace period is 500ms; the probe waits 150ms.
			if took > 2*time.Second {
				t.Errorf("answered %s after the signal, want well under the supervisor's grace period", took)
			}
			t.Logf("busy loop answered %s after SIGUSR2", took)
			// Stdin EOF ends the process although its Worker still spins.
			p.stdin.Close()
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("exit after EOF: %v, want status 0", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the worker did not exit on stdin EOF")
			}
		})
	}
}

// Memory: allocating without end ends as memory-error with recycle, from
// the host's watch of the process's RSS, before V8's own heap cap (which
// would end the process).
func TestJavaScriptMemory(t *testing.T) {
	p := startJS(t, `{"heap_limit":268435456,"max_line":1048576}`)
	p.send(`{"type":"run","id":"c1","code":"const a = [];\nwhile (true) a.push(new Array(1e6).fill(1));","max_output":65536,"interrupts":0}`)
	res := p.next("result", 60*time.Second)
	if res == nil {
		t.Fatalf("the worker ended without a result; stderr:\n%s", p.stderr.String())
	}
	if res["status"] != "memory-error" || res["recycle"] != "the call ran out of memory" {
		t.Fatalf("result %v, want memory-error with recycle", res)
	}
}

// The figures docs/languages.md quotes: start to ready, a warm stateless `1+1`
// round trip, idle RSS. Bounds are loose (the machine is shared); the
// figures are logged (go test -v -run TestJavaScriptFigures).
func TestJavaScriptFigures(t *testing.T) {
	began := time.Now()
	p := startJS(t, `{"heap_limit":0,"max_line":1048576}`)
	start := time.Since(began)
	var times, inWorker []time.Duration
	for i := range 20 {
		// As calls come through MCP: not back to back.
		time.Sleep(50 * time.Millisecond)
		sent := time.Now()
		p.send(fmt.Sprintf(`{"type":"run","id":"c%d","code":"1+1","max_output":65536,"interrupts":0}`, i))
		res := p.next("result", 30*time.Second)
		if res == nil || res["value"] != "2" {
			t.Fatalf("call %d: %v", i, res)
		}
		times = append(times, time.Since(sent))
		ms, _ := res["duration_ms"].(float64)
		inWorker = append(inWorker, time.Duration(ms*float64(time.Millisecond)))
	}
	slices.Sort(times)
	slices.Sort(inWorker)
	median := times[len(times)/2]
	if start > 30*time.Second || median > 2*time.Second {
		t.Errorf("start %s, median 1+1 %s: far slower than expected", start, median)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	rss := "?"
	if err == nil {
		for line := range strings.Lines(string(status)) {
			if strings.HasPrefix(line, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
			}
		}
	}
	t.Logf("start to ready %s; 1+1 round trip median %s (min %s, max %s; in the worker, median %s); idle RSS %s",
		start.Round(time.Millisecond), median.Round(time.Microsecond), times[0].Round(time.Microsecond),
		times[len(times)-1].Round(time.Microsecond), inWorker[len(inWorker)/2].Round(time.Microsecond), rss)
}

// Code up to --max-code (1 MiB by default) gets a result, never the end of
// the worker, whatever its shape: deep nesting once overflowed the stack of
// Deno's module loader (a Rust thread: "fatal runtime error: stack
// overflow" ended the process, from 800 nested parentheses, in a 98 KiB
// TypeScript input) or of TypeScript's parser in the host (which answered
// with an error event, and the supervisor retired the worker). Nested
// code is refused past MAX_NESTING (400) levels with a run-error; long
// code runs.
func TestJavaScriptCodeAtTheSizeBound(t *testing.T) {
	const bound = 1 << 20 // cmd/pyrun's default --max-code
	// The heap_limit the supervisor passes for the default --js-memory-limit.
	p := startJS(t, fmt.Sprintf(`{"heap_limit":%d,"max_line":%d}`, 512<<20-96<<20, 64<<20))
	// fill repeats unit n times between head and tail, n as large as fits
	// in size bytes.
	fill := func(size int, head, unit, tail string) string {
		n := (size - len(head) - len(tail)) / len(unit)
		return head + strings.Repeat(unit, n) + tail
	}
	nested := func(size int, open, mid, close string) string {
		n := (size - len(mid)) / (len(open) + len(close))
		return strings.Repeat(open, n) + mid + strings.Repeat(close, n)
	}
	deep := "nested more than 400 levels deep"
	for i, tc := range []struct {
		name, code, status, want string
	}{
		{"98 KiB of nested parentheses", nested(98<<10, "(", "1", ")"), "run-error", deep},
		{"nested parentheses", nested(bound, "(", "1", ")"), "run-error", deep},
		{"nested arrays", nested(bound, "[", "", "]"), "run-error", deep},
		{"nested function expressions", nested(bound, "(function () { return ", "1", "; })()"), "run-error", deep},
		{"nested types", "let x: " + nested(bound-100, "Array<", "number", ">") + " = [];\n1", "run-error", deep},
		{"a chain of additions", fill(bound, "1", "+1", ""), "run-error", deep},
		{"an else-if chain", fill(bound, "let a = 0;\n", "if (a) {} else ", "{}\n1"), "run-error", deep},
		{"nested as deep as allowed", strings.Repeat("(", 390) + "1" + strings.Repeat(")", 390), "success", "1"},
		{"a long single line", fill(bound, "const a = [", "1,", "0];\na.length"), "success", ""},
		{"many lines", fill(bound, "let s = 0;\n", "s += Number(\"1\") * 1; // one\n", "s"), "success", ""},
		{"one long string", fill(bound, "'", "x", "'.length"), "success", ""},
	} {
		if len(tc.code) > bound {
			t.Fatalf("%s: %d bytes, past the bound", tc.name, len(tc.code))
		}
		req, _ := json.Marshal(map[string]any{"type": "run", "id": fmt.Sprintf("c%d", i), "code": tc.code, "max_output": 65536, "interrupts": 0})
		p.send(string(req))
		res := p.answer(2 * time.Minute)
		if res == nil {
			t.Fatalf("%s (%d bytes): the worker ended; stderr:\n%s", tc.name, len(tc.code), p.stderr.String())
		}
		text := fmt.Sprint(res["error"])
		if tc.status == "success" {
			text = fmt.Sprint(res["value"])
		}
		if res["status"] != tc.status || !strings.Contains(text, tc.want) {
			t.Errorf("%s (%d bytes): %v %.200q, want %s with %q", tc.name, len(tc.code), res["status"], text, tc.status, tc.want)
		}
	}
	// The same process serves the next call; the host's gc (--expose-gc)
	// is not the code's.
	p.send(`{"type":"run","id":"after","code":"[1 + 1, typeof gc].join()","max_output":65536,"interrupts":0}`)
	if res := p.next("result", time.Minute); res == nil || res["value"] != `"2,undefined"` {
		t.Fatalf("after the big calls: %v; stderr:\n%s", res, p.stderr.String())
	}
}

package pyodidehost_test

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testproc"
	"github.com/pyrun/pyrun/supervisor"
)

// The R worker (webr/main.ts) started as supervisor/engine_r.go starts it,
// with exactly its permissions: read of its program folder and of webR's
// dist folder, two environment variables, and the flag that makes Deno
// resolve webR's CommonJS files. Keep in step with rEngine.Permissions.
func rWorkerCommand(ctx context.Context, rt *supervisor.Runtime, hostConfig string) *exec.Cmd {
	args := denoRun(rt, []string{
		"--allow-read=" + filepath.Join(rt.Dir, "webr") + "," + filepath.Join(rt.Dir, "node_modules", "webr", "dist"),
		"--allow-env=TEXT_ENCODING,TEXT_DECODER",
		"--node-modules-dir=manual",
	}, "webr/main.ts", hostConfig)
	// PYRUN_TEST_SECRET is not passed to R: the worker may read only the
	// two variables above.
	return workerProcess(ctx, rt, args, "PYRUN_TEST_SECRET=hunter2")
}

// rWorker is one running R worker and the events it wrote.
type rWorker struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncbuf.Buffer
	ready  map[string]any
	sent   atomic.Int64 // SIGUSR2 signals sent
	// recycle is the last idle event's recycle: why the worker must not
	// take another call, "" when it may.
	recycle string
}

// rEvent is an event line, decoded.
type rEvent struct {
	Type     string            `json:"type"`
	ID       string            `json:"id"`
	Stream   string            `json:"stream"`
	Text     string            `json:"text"`
	Status   string            `json:"status"`
	Value    *string           `json:"value"`
	Error    string            `json:"error"`
	MIMEType string            `json:"mime_type"`
	Data     string            `json:"data"`
	Path     string            `json:"path"`
	More     bool              `json:"more"`
	Recycle  string            `json:"recycle"`
	Dropped  map[string]int    `json:"dropped"`
	Versions map[string]string `json:"versions"`
	Held     int               `json:"displays_dropped"`
}

func startR(t testing.TB, hostConfig string) *rWorker {
	t.Helper()
	rt := provision(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := rWorkerCommand(ctx, rt, hostConfig)
	w := &rWorker{t: t, cmd: cmd, lines: make(chan string, 64), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = w.stderr
	stdin, stdout := testproc.StartPiped(t, cmd)
	w.stdin = stdin
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.lines)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := readLine(r)
			if err != nil {
				return
			}
			w.lines <- line
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(exitTimeout):
		}
		cancel()
		_ = cmd.Wait()
	})
	line := w.next(startTimeout, "ready")
	if err := json.Unmarshal([]byte(line), &w.ready); err != nil || w.ready["type"] != "ready" {
		t.Fatalf("first line is not ready: %q\nstderr:\n%s", line, w.stderr.String())
	}
	return w
}

func (w *rWorker) next(limit time.Duration, what string) string {
	w.t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("R worker stdout ended while waiting for %s\nstderr:\n%s", what, w.stderr.String())
		}
		return line
	case <-time.After(limit):
		w.t.Fatalf("no event after %s while waiting for %s\nstderr:\n%s", limit, what, w.stderr.String())
	}
	return ""
}

// send writes one request line and returns the events up to its answer.
func (w *rWorker) send(line string) []rEvent {
	w.t.Helper()
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		w.t.Fatalf("write request: %v", err)
	}
	return w.answer(line, false)
}

// answer reads events up to the one that answers line. With interrupt
// set it sends SIGUSR2 every 100ms meanwhile, as the supervisor does to
// stop a call.
func (w *rWorker) answer(line string, interrupt bool) []rEvent {
	w.t.Helper()
	var tick <-chan time.Time
	if interrupt {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		tick = ticker.C
	}
	timeout := time.After(requestTimeout)
	var evs []rEvent
	for {
		var raw string
		select {
		case <-tick:
			w.signal()
			continue
		case <-timeout:
			w.t.Fatalf("no answer after %s to %s\nstderr:\n%s", requestTimeout, line, w.stderr.String())
		case l, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("R worker stdout ended while waiting for the answer to %s\nstderr:\n%s", line, w.stderr.String())
			}
			raw = l
		}
		var ev rEvent
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			w.t.Fatalf("R worker wrote a line that is not an event: %q", raw)
		}
		evs = append(evs, ev)
		switch ev.Type {
		case "result":
			// The R worker settles: idle follows, once R is reset (docs/protocol.md, Idle).
			var idle rEvent
			if raw := w.next(requestTimeout, "idle after the answer to "+line); json.Unmarshal([]byte(raw), &idle) != nil || idle.Type != "idle" || idle.ID != ev.ID {
				w.t.Fatalf("after the result of %s: %q, want idle for the same call", line, raw)
			}
			w.recycle = idle.Recycle
			return evs
		case "pong", "error":
			return evs
		}
	}
}

// interrupt runs code and stops it with SIGUSR2.
func (w *rWorker) interrupt(code string, extra map[string]any) []rEvent {
	w.t.Helper()
	line := w.request(code, extra)
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		w.t.Fatalf("write request: %v", err)
	}
	return w.answer(line, true)
}

// run runs code as a run request with extra fields and returns its events.
func (w *rWorker) run(code string, extra map[string]any) []rEvent {
	w.t.Helper()
	return w.send(w.request(code, extra))
}

func (w *rWorker) request(code string, extra map[string]any) string {
	req := map[string]any{"type": "run", "id": "c", "code": code, "max_output": 65536, "interrupts": w.sent.Load()}
	for k, v := range extra {
		req[k] = v
	}
	b, _ := json.Marshal(req)
	return string(b)
}

func (w *rWorker) signal() {
	w.sent.Add(1)
	if err := w.cmd.Process.Signal(interruptSignal); err != nil {
		w.t.Errorf("signal the R worker: %v", err)
	}
}

// result is the last event, which must be a result.
func result(t *testing.T, evs []rEvent) rEvent {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != "result" {
		t.Fatalf("answer is %+v, want a result", last)
	}
	return last
}

// output joins the output events of one stream ("" for both, each run of
// one stream tagged with it: how lines are grouped into events depends on
// when they came).
func output(evs []rEvent, stream string) string {
	var b strings.Builder
	last := ""
	for _, ev := range evs {
		if ev.Type != "output" {
			continue
		}
		if stream == "" {
			if ev.Stream != last {
				fmt.Fprintf(&b, "%s: ", ev.Stream)
				last = ev.Stream
			}
			b.WriteString(ev.Text)
		} else if ev.Stream == stream {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func wantSuccess(t *testing.T, evs []rEvent, code string) rEvent {
	t.Helper()
	r := result(t, evs)
	if r.Status != "success" {
		t.Fatalf("%s: status %q (%s), want success; events %+v", code, r.Status, r.Error, evs)
	}
	return r
}

// compactJSON re-encodes JSON text without indentation, for comparison.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("value %q is not JSON: %v", s, err)
	}
	return b.String()
}

const rConfig = `{"heap_limit":671088640,"max_line":67108864}`

func TestRReadySaysEngineAndVersions(t *testing.T) {
	w := startR(t, rConfig)
	var ev rEvent
	b, _ := json.Marshal(w.ready)
	_ = json.Unmarshal(b, &ev)
	if w.ready["engine"] != "r" || w.ready["protocol"] != float64(6) {
		t.Errorf("ready = %v, want engine r, protocol 6", w.ready)
	}
	if ev.Versions["r"] != "4.6.0" || ev.Versions["webr"] != "0.6.0" {
		t.Errorf("ready versions = %v, want r 4.6.0 and webr 0.6.0", ev.Versions)
	}
	if _, ok := w.ready["startup_ms"].(float64); !ok {
		t.Errorf("ready has no startup_ms: %v", w.ready)
	}
	if got := (supervisor.R).Versions(provision(t)); got["r"] != "4.6.0" || got["webr"] != "0.6.0" {
		t.Errorf("R.Versions = %v, want what the worker says", got)
	}
}

func TestRBadRequestsAndLimits(t *testing.T) {
	w := startR(t, `{"heap_limit":671088640,"max_line":4096}`)
	for _, tc := range []struct{ line, want string }{
		{"not json", "bad request: SyntaxError"},
		{`{"type":"launch","id":"x"}`, `bad request: unknown type "launch"`},
		{`{"type":"run","id":"x"}`, "bad request: run needs id and code"},
		{`[1,2]`, "bad request"},
		{`{"type":"run","id":"x","code":"` + strings.Repeat("1", 5000) + `"}`, "request line longer than 4096 bytes"},
	} {
		evs := w.send(tc.line)
		if last := evs[len(evs)-1]; last.Type != "error" || !strings.HasPrefix(last.Error, tc.want) {
			t.Errorf("%.40s: %+v, want error %q", tc.line, last, tc.want)
		}
	}
	if evs := w.send(`{"type":"ping","id":"p1"}`); evs[0].Type != "pong" || evs[0].ID != "p1" {
		t.Errorf("ping: %+v", evs)
	}
	// Output past max_output is dropped and counted.
	evs := w.run("for (i in 1:5000) cat('line', i, '\\n')", map[string]any{"max_output": 1000})
	r := wantSuccess(t, evs, "big output")
	if got := output(evs, "stdout"); len(got) != 1000 || !strings.HasPrefix(got, "line 1 \n") {
		t.Errorf("capped stdout has %d characters, want 1000", len(got))
	}
	if r.Dropped["stdout"] <= 0 {
		t.Errorf("dropped = %v, want stdout counted", r.Dropped)
	}
}

// The R worker's TypeScript stays clean under Deno's formatter, linter and
// type checker, offline, as TestDenoTools keeps the Python worker's.
func TestRDenoTools(t *testing.T) {
	rt := provision(t)
	sources := []string{"webr/main.ts", "webr/thread.ts", "webr/value.ts"}
	for _, tool := range [][]string{
		append([]string{"fmt", "--check"}, sources...),
		append([]string{"lint"}, sources...),
		{"check", "--cached-only", "--no-remote", "--no-config", "--node-modules-dir=manual", filepath.Join(rt.Dir, "webr", "main.ts")},
	} {
		t.Run(tool[0], func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), rt.Deno, tool...)
			cmd.Env = []string{"DENO_DIR=" + t.TempDir(), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("deno %s: %v\n%s", strings.Join(tool, " "), err, out)
			}
		})
	}
}

// BenchmarkRWorker measures an R worker as docs/languages.md quotes it: the wall
// time from start to ready (start-ms), its resident memory when idle after
// one call (idle-MiB), and a warm 1 + 1 round trip over the pipe (ns/op).
//
//	go test -run '^$' -bench BenchmarkRWorker -benchtime 50x ./pyodide-host/
func BenchmarkRWorker(b *testing.B) {
	began := time.Now()
	w := startR(b, `{"heap_limit":973078528,"max_line":67108864}`)
	start := time.Since(began)
	line := w.request("1 + 1", nil)
	w.send(line)
	var rss float64
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid)); err == nil {
		for l := range strings.Lines(string(status)) {
			if _, err := fmt.Sscanf(l, "VmRSS: %f kB", &rss); err == nil {
				break
			}
		}
	}
	b.ResetTimer() // which also drops metrics: they are reported after the loop
	for b.Loop() {
		if r := w.send(line); r[len(r)-1].Type != "result" {
			b.Fatalf("answer %+v", r[len(r)-1])
		}
	}
	b.ReportMetric(float64(start.Milliseconds()), "start-ms")
	b.ReportMetric(rss/1024, "idle-MiB")
}

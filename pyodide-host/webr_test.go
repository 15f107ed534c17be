package pyodidehost_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
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

// The value of the last visible expression, as JSON, in the forms that
// docs/protocol.md's "Engines: R" lists.
func TestRValueForms(t *testing.T) {
	w := startR(t, rConfig)
	for _, tc := range []struct{ code, want string }{
		{"1 + 1", `2`},
		{"5L", `5`},
		{"'naïve ✓'", `"naïve ✓"`},
		{"TRUE", `true`},
		{"c(1.5, 2, NA)", `[1.5,2,null]`},
		{"c(a = 1, b = 2)", `{"a":1,"b":2}`},
		{"c(Inf, -Inf, NaN)", `["Infinity","-Infinity",null]`},
		{"NA", `null`},
		{"character(0)", `[]`},
		{"list(1, 'two', NULL)", `[1,"two",null]`},
		{"list(a = 1, b = list(c = 'x'))", `{"a":1,"b":{"c":"x"}}`},
		{"data.frame(x = 1:2, y = c('a', 'b'))", `[{"x":1,"y":"a"},{"x":2,"y":"b"}]`},
		{"factor(c('lo', 'hi', 'lo'))", `["lo","hi","lo"]`},
		{"as.Date('2024-02-29')", `"2024-02-29"`},
		{"as.POSIXct('2024-02-29 12:30:00', tz = 'UTC')", `"2024-02-29T12:30:00Z"`},
		{"matrix(1:4, nrow = 2)", `[[1,3],[2,4]]`},
		{"1+2i", `"1+2i"`},
		{"as.raw(c(1, 255))", `[1,255]`},
	} {
		r := wantSuccess(t, w.run(tc.code, nil), tc.code)
		if r.Value == nil {
			t.Errorf("%s: no value, want %s", tc.code, tc.want)
			continue
		}
		if got := compactJSON(t, *r.Value); got != tc.want {
			t.Errorf("%s: value %s, want %s", tc.code, got, tc.want)
		}
	}
	// No value: NULL, an invisible value, an assignment.
	for _, code := range []string{"NULL", "invisible(3)", "x <- 5", "f <- function() 1"} {
		if r := wantSuccess(t, w.run(code, nil), code); r.Value != nil {
			t.Errorf("%s: value %s, want none", code, *r.Value)
		}
	}
}

func TestRPrintStreamsWarningsMessagesInOrder(t *testing.T) {
	w := startR(t, rConfig)
	evs := w.run("print('hi')\ncat('to stderr\\n', file = stderr())\nmessage('a message')\n"+
		"x <- log(-1)\nwarning('careful')\nf <- function() warning('inside')\nf()\n1 + 1", nil)
	r := wantSuccess(t, evs, "streams")
	want := "stdout: [1] \"hi\"\n" +
		"stderr: to stderr\na message\nWarning in log(-1) : NaNs produced\nWarning: careful\nWarning in f() : inside\n" +
		"stdout: [1] 2\n"
	if got := output(evs, ""); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if r.Value == nil || *r.Value != "2" {
		t.Errorf("value %v, want 2", r.Value)
	}
	// Autoprint as at R's console: every visible top-level value is printed.
	evs = w.run("3\ninvisible(4)\ndata.frame(n = 1:2)", nil)
	if got, want := output(evs, "stdout"), "[1] 3\n  n\n1 1\n2 2\n"; got != want {
		t.Errorf("autoprint output %q, want %q", got, want)
	}
	// A call with options(warn = -1) says nothing of its warnings.
	evs = w.run("options(warn = -1); log(-1)", nil)
	if got := output(evs, "stderr"); got != "" {
		t.Errorf("warn = -1: stderr %q, want none", got)
	}
}

// R's lines are output events as R writes them, while the call runs: the
// first ones come before the call ends (it would sleep ten minutes; SIGUSR2
// ends it once they are in), in the order written across the streams. A
// text left without a newline ends its call's output, with one, and does
// not start the next call's.
func TestRLiveOutput(t *testing.T) {
	w := startR(t, rConfig)
	line := w.request("cat('early\\n'); message('note'); cat('partial'); Sys.sleep(600)", nil)
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	var evs []rEvent
	for output(evs, "") != "stdout: early\nstderr: note\n" {
		var ev rEvent
		raw := w.next(requestTimeout, "the call's first lines")
		if err := json.Unmarshal([]byte(raw), &ev); err != nil || ev.Type != "output" {
			t.Fatalf("while the call sleeps: %q; want its first lines as output events, got so far %q", raw, output(evs, ""))
		}
		evs = append(evs, ev)
	}
	evs = append(evs, w.answer(line, true)...)
	if r := result(t, evs); r.Status != "interrupted" {
		t.Fatalf("status %q (%s), want interrupted", r.Status, r.Error)
	}
	if got, want := output(evs, ""), "stdout: early\nstderr: note\nstdout: partial\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	for _, tc := range []struct{ code, want string }{
		{"cat('next\\n')", "stdout: next\n"},
		{"cat('a'); cat('b', file = stderr())", "stdout: a\nstderr: b\n"},
		{"cat('c\\n'); message('d')", "stdout: c\nstderr: d\n"},
		{"cat('é ü 漢 ✓\\n')", "stdout: é ü 漢 ✓\n"}, // a line is decoded whole
	} {
		if got := output(w.run(tc.code, nil), ""); got != tc.want {
			t.Errorf("%s: output %q, want %q", tc.code, got, tc.want)
		}
	}
}

func TestRErrors(t *testing.T) {
	w := startR(t, rConfig)
	for _, tc := range []struct{ code, want, out string }{
		{"stop('boom')", "Error: boom", ""},
		{"f <- function(x) stop('bad x: ', x)\nf(3)", "Error in f(3) : bad x: 3", ""},
		{"print('before')\nundefined_thing", "Error: object 'undefined_thing' not found", "[1] \"before\"\n"},
		{"a b", "Error: <text>:1:3: unexpected symbol\n1: a b\n      ^", ""},
		{"log('a')", "Error in log(\"a\") : non-numeric argument to mathematical function", ""},
	} {
		evs := w.run(tc.code, nil)
		r := result(t, evs)
		if r.Status != "run-error" || r.Error != tc.want {
			t.Errorf("%q: %s %q, want run-error %q", tc.code, r.Status, r.Error, tc.want)
		}
		if got := output(evs, "stdout"); got != tc.out {
			t.Errorf("%q: stdout %q, want %q (output before the error is kept)", tc.code, got, tc.out)
		}
	}
	wantSuccess(t, w.run("1", nil), "after errors")
}

// A busy loop and a sleep are stopped by SIGUSR2 (webR.interrupt()), and
// the same R serves the next call; a signal while no call runs is ignored.
func TestRInterrupt(t *testing.T) {
	w := startR(t, rConfig)
	for _, code := range []string{"while (TRUE) {}", "Sys.sleep(600)", "repeat x <- sum(runif(100))"} {
		began := time.Now()
		r := result(t, w.interrupt(code, nil))
		if r.Status != "interrupted" {
			t.Fatalf("%s: status %q (%s), want interrupted", code, r.Status, r.Error)
		}
		if d := time.Since(began); d > 30*time.Second {
			t.Errorf("%s: interrupted after %s", code, d)
		}
		r = wantSuccess(t, w.run("1 + 1", nil), "after "+code)
		if r.Value == nil || *r.Value != "2" {
			t.Errorf("after the interrupt: value %v, want 2", r.Value)
		}
	}
	// A signal between calls (as one that arrives after its call ended) is
	// stale for the next call, which carries the count.
	w.signal()
	r := wantSuccess(t, w.run("Sys.sleep(0.5); 3", nil), "after a stale signal")
	if r.Value == nil || *r.Value != "3" {
		t.Errorf("after a stale signal: value %v, want 3", r.Value)
	}
}

// Many signals for one call (the supervisor repeats SIGUSR2 until the
// result comes, and R can be slow to stop under load) interrupt it once:
// the rest must not stay queued in webR and end the worker's clean-up.
func TestRInterruptBurst(t *testing.T) {
	w := startR(t, rConfig)
	for round := range 2 {
		line := w.request("Sys.sleep(600)", nil)
		if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
			t.Fatalf("write request: %v", err)
		}
		tick := time.NewTicker(5 * time.Millisecond)
		timeout := time.After(requestTimeout)
		var res rEvent
		for res.Type != "result" {
			select {
			case <-tick.C:
				w.signal()
			case <-timeout:
				t.Fatalf("no answer after %s to %s\nstderr:\n%s", requestTimeout, line, w.stderr.String())
			case l, ok := <-w.lines:
				if !ok {
					t.Fatalf("round %d: R worker stdout ended while being interrupted\nstderr:\n%s", round, w.stderr.String())
				}
				res = rEvent{}
				if err := json.Unmarshal([]byte(l), &res); err != nil {
					t.Fatalf("R worker wrote a line that is not an event: %q", l)
				}
			}
		}
		tick.Stop()
		if res.Status != "interrupted" {
			t.Fatalf("round %d: status %q (%s), want interrupted", round, res.Status, res.Error)
		}
		// A few more signals land as the call ends, as the supervisor's can.
		for range 5 {
			w.signal()
		}
		r := wantSuccess(t, w.run("1 + 1", nil), "after a burst of signals")
		if r.Value == nil || *r.Value != "2" {
			t.Errorf("round %d: after the burst: value %v, want 2", round, r.Value)
		}
	}
}

// A plot with no device open becomes a PNG display; every page of every
// file device (png, svg) comes back too, and max_displays caps them.
func TestRPlots(t *testing.T) {
	w := startR(t, rConfig)
	evs := w.run("plot(1:10)", nil)
	wantSuccess(t, evs, "plot")
	var shown []rEvent
	for _, ev := range evs {
		if ev.Type == "display" {
			shown = append(shown, ev)
		}
	}
	if len(shown) != 1 || shown[0].MIMEType != "image/png" {
		t.Fatalf("plot(1:10): displays %+v, want one image/png", shown)
	}
	data, err := base64.StdEncoding.DecodeString(shown[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("display is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 672 || b.Dy() != 480 {
		t.Errorf("plot size %v, want 672x480", b)
	}

	evs = w.run("png('mine.png', width = 300, height = 300); plot(1); invisible(dev.off())\n"+
		"svg(); plot(1); plot(2)\nhist(rnorm(50))", nil)
	wantSuccess(t, evs, "devices")
	var mimes []string
	for _, ev := range evs {
		if ev.Type == "display" {
			mimes = append(mimes, ev.MIMEType)
		}
	}
	// svg() without onefile writes one file per page; hist() drew on the
	// open svg device.
	if got, want := strings.Join(mimes, ","), "image/png,image/svg+xml,image/svg+xml,image/svg+xml"; got != want {
		t.Errorf("displays %s, want %s", got, want)
	}

	evs = w.run("for (i in 1:5) plot(i)", map[string]any{"max_displays": 2})
	r := wantSuccess(t, evs, "capped")
	n := 0
	for _, ev := range evs {
		if ev.Type == "display" {
			n++
		}
	}
	if n != 2 || r.Held != 3 {
		t.Errorf("5 plots with max_displays 2: %d displays, %d dropped; want 2 and 3", n, r.Held)
	}
	// Devices are closed at the end of a call: the next call starts with none.
	r = wantSuccess(t, w.run("dev.cur()", nil), "dev.cur")
	if r.Value == nil || compactJSON(t, *r.Value) != `{"null device":1}` {
		t.Errorf("dev.cur() after a call: %v, want the null device", r.Value)
	}
}

func TestRFiles(t *testing.T) {
	w := startR(t, rConfig)
	in := base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n3,4\n"))
	evs := w.run("d <- read.csv('data/in.csv')\nwrite.csv(d * 2, '/output/twice.csv', row.names = FALSE)\n"+
		"dir.create('/output/sub'); saveRDS(1, '/output/sub/one.rds')\nsum(d$b)",
		map[string]any{"input_files": []map[string]string{{"path": "data/in.csv", "data": in}}})
	r := wantSuccess(t, evs, "files")
	if r.Value == nil || *r.Value != "6" {
		t.Errorf("value %v, want 6", r.Value)
	}
	var files []string
	for _, ev := range evs {
		if ev.Type == "file" {
			files = append(files, ev.Path+" "+ev.MIMEType)
			if ev.Path == "twice.csv" {
				b, _ := base64.StdEncoding.DecodeString(ev.Data)
				if string(b) != "\"a\",\"b\"\n2,4\n6,8\n" {
					t.Errorf("twice.csv = %q", b)
				}
			}
		}
	}
	if got, want := strings.Join(files, "; "), "sub/one.rds application/octet-stream; twice.csv text/csv"; got != want {
		t.Errorf("file events %q, want %q", got, want)
	}
	// A stateless call finds none of it.
	r = wantSuccess(t, w.run("c(file.exists('data/in.csv'), length(list.files('/output', recursive = TRUE)))", nil), "after")
	if r.Value == nil || compactJSON(t, *r.Value) != "[0,0]" {
		t.Errorf("after a stateless call: %v, want [0,0] (no input file, empty /output/)", r.Value)
	}
	for _, bad := range []string{"../x", "/etc/x", "a/../../x"} {
		evs := w.run("1", map[string]any{"input_files": []map[string]string{{"path": bad, "data": ""}}})
		if r := result(t, evs); r.Status != "run-error" || !strings.Contains(r.Error, "must be relative") {
			t.Errorf("input file %q: %s %q, want run-error", bad, r.Status, r.Error)
		}
	}
}

// Nothing of a stateless call reaches the next: variables, attached
// packages, options, environment variables, the working directory, files.
func TestRStatelessCallsLeaveNothing(t *testing.T) {
	w := startR(t, rConfig)
	wantSuccess(t, w.run("x <- 1; assign('y', 2, envir = globalenv()); library(stats4); options(digits = 3, pyrun.mine = 1)\n"+
		"Sys.setenv(MINE = 'yes', HOME = '/elsewhere'); writeLines('x', 'left.txt'); writeLines('t', file.path(tempdir(), 't'))\n"+
		"writeLines('t', '/tmp/t2'); dir.create('/tmp/d'); setwd('/tmp')", nil), "leave things")
	r := wantSuccess(t, w.run("list(ls(all.names = TRUE), 'package:stats4' %in% search(), getOption('digits'), "+
		"is.null(getOption('pyrun.mine')), Sys.getenv(c('MINE', 'HOME')), getwd(), list.files(), "+
		"list.files(tempdir()), file.exists('/tmp/t2', '/tmp/d'), dir.exists(tempdir()))", nil), "look")
	want := `[[],false,7,true,{"MINE":"","HOME":"/home/web_user"},"/home/web_user",[],[],[false,false],true]`
	if r.Value == nil || compactJSON(t, *r.Value) != want {
		t.Errorf("what the next call sees: %v\nwant %s", r.Value, want)
	}
}

func TestRSessionKeepsState(t *testing.T) {
	w := startR(t, `{"heap_limit":671088640,"max_line":67108864,"session":true}`)
	wantSuccess(t, w.run("x <- 41; library(stats4); writeLines('kept', 'notes.txt'); writeLines('o', '/output/o.txt')",
		map[string]any{"keep_output": true}), "first")
	evs := w.run("writeLines('p', '/output/p.txt'); c(x + 1, 'package:stats4' %in% search(), readLines('notes.txt') == 'kept')",
		map[string]any{"keep_output": true})
	r := wantSuccess(t, evs, "second")
	if r.Value == nil || compactJSON(t, *r.Value) != "[42,1,1]" {
		t.Errorf("session: %v, want [42,1,1]", r.Value)
	}
	var files []string
	for _, ev := range evs {
		if ev.Type == "file" {
			files = append(files, ev.Path)
		}
	}
	if strings.Join(files, ",") != "p.txt" {
		t.Errorf("session files sent %v, want only the one this call wrote", files)
	}
	// An interrupted call leaves the session as the interrupt found it.
	if r := result(t, w.interrupt("x <- 100; while (TRUE) {}", map[string]any{"keep_output": true})); r.Status != "interrupted" {
		t.Fatalf("status %q, want interrupted", r.Status)
	}
	if r := wantSuccess(t, w.run("x", nil), "x"); r.Value == nil || *r.Value != "100" {
		t.Errorf("after the interrupt x = %v, want 100", r.Value)
	}
}

// Sessions as namespaces on one shared session worker (docs/sessions.md,
// Shared session workers): each keeps its own variables (also those a call
// bound in the global environment itself), working directory and files,
// random stream, and options(); a dropped one is gone with its files.
func TestRSharedSessionNamespaces(t *testing.T) {
	w := startR(t, `{"heap_limit":671088640,"max_line":67108864,"session":true}`)
	in := func(ns string, drop ...string) map[string]any {
		return map[string]any{"keep_output": true, "namespace": ns, "drop": drop}
	}
	value := func(evs []rEvent, what string) string {
		t.Helper()
		r := wantSuccess(t, evs, what)
		if r.Value == nil {
			t.Fatalf("%s: no value", what)
		}
		return compactJSON(t, *r.Value)
	}
	wantSuccess(t, w.run("x <- 'a'; assign('g', 'a', envir = globalenv()); f <- function() x\n"+
		"writeLines('a', 'f.txt'); writeLines('a', '/tmp/t.txt'); writeLines('a', '/output/a.txt')\n"+
		"dir.create('sub'); setwd('sub'); options(digits = 3); set.seed(1); first <- runif(2); library(stats4)", in("a")), "a")
	// What is R's, not a session's, is shared (docs/sessions.md): the search path.
	if got := value(w.run("c(exists('x'), exists('g'), exists('f'), file.exists('f.txt', '/tmp/t.txt', '/output/a.txt'), "+
		"getwd(), getOption('digits'), exists('.Random.seed', envir = globalenv()), 'package:stats4' %in% search())", in("b")), "b looks"); got != `["FALSE","FALSE","FALSE","FALSE","FALSE","FALSE","/home/web_user","7","FALSE","TRUE"]` {
		t.Errorf("a new session sees %s, want none of the other's state but the search path", got)
	}
	// b's draws do not move a's stream; a's set.seed does not seed b's.
	wantSuccess(t, w.run("x <- 'b'; writeLines('b', 'f.txt'); set.seed(99); b1 <- runif(1)", in("b")), "b")
	got := value(w.run("set.seed(1); ref <- runif(4); set.seed(1); again <- runif(3)\n"+
		"list(x, g, f(), readLines('../f.txt'), readLines('/tmp/t.txt'), list.files('/output'), basename(getwd()), "+
		"getOption('digits'), identical(first, again[1:2]))", in("a")), "a back")
	if got != `["a","a","a","a","a","a.txt","sub",3,true]` {
		t.Errorf("the first session, back: %s", got)
	}
	if got := value(w.run("set.seed(99); c(identical(b1, runif(1)), readLines('f.txt'), x)", in("b")), "b back"); got != `["TRUE","b","b"]` {
		t.Errorf("the second session, back: %s", got)
	}
	// a's stream goes on where a left it, whatever b drew meanwhile.
	if got := value(w.run("identical(runif(1), ref[4])", in("a")), "a stream"); got != "true" {
		t.Errorf("a's stream: %s", got)
	}
	// Dropping a forgets its environment and its stored files.
	if got := value(w.run("list.files('/sessions', recursive = TRUE)", in("b", "a")), "after drop"); got != "[]" {
		t.Errorf("after a was dropped the store holds %s", got)
	}
	if got := value(w.run("c(exists('x'), file.exists('f.txt'))", in("a")), "a again"); got != "[false,false]" {
		t.Errorf("a dropped then named again: %s, want a new session", got)
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

// heap_limit bounds the worker: an allocation that would take it past is
// a memory-error (with recycle) and R, unharmed, serves the next call.
// The limit is the supervisor's for R's default 1 GiB, less 96 MiB.
func TestRMemoryLimit(t *testing.T) {
	w := startR(t, `{"heap_limit":973078528,"max_line":67108864}`)
	r := result(t, w.run("x <- numeric(1e8); length(x)", nil)) // 800 MB
	if r.Status != "memory-error" || !strings.Contains(r.Error, "cannot allocate") || r.Recycle == "" {
		t.Errorf("past the cap: %s %q recycle %q, want memory-error with recycle", r.Status, r.Error, r.Recycle)
	}
	if r := wantSuccess(t, w.run("length(numeric(1e7))", nil), "after"); r.Value == nil || *r.Value != "10000000" {
		t.Errorf("after the memory error: %v", r.Value)
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

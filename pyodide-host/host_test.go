package pyodidehost_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testproc"
	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

var update = flag.Bool("update", false, "rewrite the events sections of testdata/*.txtar from the real worker")

// hostSources are the TypeScript files of the worker program.
var hostSources = []string{"main.ts", "worker.ts", "checkpoint.ts", "lines.ts", "protocol.ts", "serve.ts", "events.ts", "guards.ts", "mounts.ts", "toolcalls.ts", "warm.ts", "sessions.ts", "dynlibs.ts",
	"js/main.ts", "js/runner.ts", "js/rewrite.ts", "js/protocol.ts"}

// TestDenoTools keeps the worker program clean under Deno's own formatter,
// linter and type checker, offline: DENO_DIR is empty and nothing may be
// fetched.
func TestDenoTools(t *testing.T) {
	// The runtime pyrun installs carries Deno and, next to its copies of the
	// host files, Pyodide's types for deno check: a fresh clone needs no npm
	// install in this folder to run this test.
	rt := provision(t)
	fmtFiles := append([]string{"deno.json", "../docs/protocol.md"}, hostSources...)
	var installed []string
	for _, f := range hostSources {
		installed = append(installed, filepath.Join(rt.Dir, f))
	}
	for _, tool := range [][]string{
		append([]string{"fmt", "--check"}, fmtFiles...),
		append([]string{"lint"}, hostSources...),
		append([]string{"check", "--cached-only", "--no-remote"}, installed...),
	} {
		t.Run(tool[0], func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), rt.Deno, tool...)
			cmd.Env = []string{"DENO_DIR=" + t.TempDir(), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("deno %s: %v\n%s", strings.Join(tool, " "), err, out)
			}
		})
	}
}

// A transcript (testdata/*.txtar) is replayed against the real worker:
//
//   - "config" (optional): the worker's one argument, the HostConfig JSON;
//     without it, the one the supervisor passes for its default Config.
//   - "requests": one request line per line, sent one at a time; blank lines
//     and lines starting with # are skipped. $RUNTIME stands for the runtime
//     folder and $SENT the number of SIGUSR2 signals sent so far. Two
//     directives send SIGUSR2 as the supervisor does to stop a call:
//     "!interrupt" alone on a line sends it at once, and a request line
//     prefixed with "!interrupt-after-output " is sent and the signal follows
//     the request's first output event, repeated every 100ms until the
//     request is answered. "!idle 1s" leaves the worker idle that long,
//     for what it does while it waits (warming calls).
//   - "events": every line the worker wrote, from ready to its exit on stdin
//     EOF, with duration_ms and startup_ms removed and the runtime folder
//     written as $RUNTIME.
//
// After each request the replay reads events up to the one that answers it
// (result, pong or error; a warm request has none): the worker serves one
// request at a time.
func TestTranscripts(t *testing.T) {
	replayAll(t, "testdata", workerCommand)
}

// replayAll replays each transcript of dir against workers that start
// starts, in parallel.
func replayAll(t *testing.T, dir string, start startFunc) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s (%v)", dir, err)
	}
	rt := provision(t)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			replayFile(t, rt, file, start)
		})
	}
}

// provision is the worker runtime, provisioned the way pyrun does
// (testruntime.Get), for this package's harnesses of every engine.
func provision(t testing.TB) *supervisor.Runtime {
	t.Helper()
	return testruntime.Get(t)
}

// startFunc builds the command that starts a worker of one engine.
type startFunc func(ctx context.Context, rt *supervisor.Runtime, hostConfig string) *exec.Cmd

func replayFile(t *testing.T, rt *supervisor.Runtime, file string, start startFunc) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ar := txtar.Parse(data)
	var config, requests, events *txtar.File
	for i := range ar.Files {
		f := &ar.Files[i]
		switch f.Name {
		case "config":
			config = f
		case "requests":
			requests = f
		case "events":
			events = f
		default:
			t.Fatalf("%s: unknown section %q", file, f.Name)
		}
	}
	if requests == nil {
		t.Fatalf("%s: no requests section", file)
	}
	hostConfig := defaultHostConfig()
	if config != nil {
		hostConfig = strings.TrimSpace(string(config.Data))
	}
	var reqs []step
	for line := range strings.Lines(string(requests.Data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var st step
		switch {
		case line == "!interrupt":
			st.interrupt = true
		case strings.HasPrefix(line, "!idle "):
			d, err := time.ParseDuration(strings.TrimPrefix(line, "!idle "))
			if err != nil {
				t.Fatalf("%s: %q: %v", file, line, err)
			}
			st.idle = d
		case strings.HasPrefix(line, "!interrupt-after-output "):
			st.interruptAfterOutput = true
			line = strings.TrimPrefix(line, "!interrupt-after-output ")
			fallthrough
		default:
			st.line = strings.ReplaceAll(line, "$RUNTIME", rt.Dir)
		}
		reqs = append(reqs, st)
	}

	got := replay(t, rt, hostConfig, reqs, start)
	for i, line := range got {
		got[i] = strings.ReplaceAll(line, rt.Dir, "$RUNTIME")
	}
	gotText := strings.Join(got, "\n") + "\n"

	if *update {
		if events == nil {
			ar.Files = append(ar.Files, txtar.File{Name: "events"})
			events = &ar.Files[len(ar.Files)-1]
		}
		events.Data = []byte(gotText)
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if events == nil {
		t.Fatalf("%s: no events section; run go test -update", file)
	}
	if want := string(events.Data); want != gotText {
		t.Errorf("%s: events differ (-want +got; go test -update rewrites them):\n%s", file, lineDiff(want, gotText))
	}
}

// Worker start-up as supervisor/permissions.go's denoLaunch, workerEnv and
// supervisor/pool.go's NewPool build it for the default Config (network
// "public"); keep these in step with them. Left out: setProcAttr's process
// group and parent-death signal, which change nothing the worker does.
var deniedNets = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"224.0.0.0/4", "240.0.0.0/4", "localhost", "[::1]", "[::]",
	"metadata.google.internal",
}

// denoRun is a worker's deno command line as denoLaunch builds it: the flags
// every engine's worker gets, the engine's own, its program and the HostConfig.
func denoRun(rt *supervisor.Runtime, flags []string, program, hostConfig string) []string {
	args := []string{"run", "--no-prompt", "--cached-only", "--no-config", "--quiet"}
	return append(append(args, flags...), filepath.Join(rt.Dir, program), hostConfig)
}

func workerCommand(ctx context.Context, rt *supervisor.Runtime, hostConfig string) *exec.Cmd {
	// The read list is the python engine's own, so a new worker module
	// needs naming in one place only (supervisor/engine_python.go).
	var perms supervisor.Permissions
	for _, e := range supervisor.Engines() {
		if e.Name() == "python" {
			p, err := e.Permissions(rt)
			if err != nil {
				panic(fmt.Sprintf("python engine permissions: %v", err))
			}
			perms = p
		}
	}
	if len(perms.Read) == 0 {
		panic("no python engine among supervisor.Engines()")
	}
	flags := append([]string{"--allow-read=" + strings.Join(perms.Read, ",")}, perms.Flags...)
	args := denoRun(rt, append(flags, "--allow-net", "--deny-net="+strings.Join(deniedNets, ",")), "main.ts", hostConfig)
	return workerProcess(ctx, rt, args)
}

// workerProcess is a Deno process of rt with args in the environment and
// working folder of supervisor/permissions.go's workerEnv and the pool's
// workers, plus extra environment variables; every engine's harness
// starts its worker through it.
func workerProcess(ctx context.Context, rt *supervisor.Runtime, args []string, extraEnv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, rt.Deno, args...)
	cmd.Env = append([]string{
		"DENO_DIR=" + rt.DenoDir,
		"DENO_NO_UPDATE_CHECK=1",
		"DENO_NO_PROMPT=1",
		"NO_COLOR=1",
		"MALLOC_MMAP_THRESHOLD_=131072",
	}, extraEnv...)
	cmd.Dir = rt.WorkDir
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// defaultHostConfig is the argument the supervisor passes for its default
// Config: a 512 MiB memory limit less 96 MiB for Deno, and 64 MiB lines.
func defaultHostConfig() string {
	return fmt.Sprintf(`{"heap_limit":%d,"max_line":%d}`, 512<<20-96<<20, 64<<20)
}

// Limits for one replay.
const (
	startTimeout   = 90 * time.Second
	requestTimeout = 60 * time.Second
	exitTimeout    = 10 * time.Second
	maxEventLine   = 64 << 20
)

// step is one line of a requests section.
type step struct {
	line                 string        // the request to send, if any
	interrupt            bool          // send SIGUSR2 now
	interruptAfterOutput bool          // send SIGUSR2 after the request's first output event
	idle                 time.Duration // leave the worker idle this long (what it does meanwhile is under test)
}

// replay starts a worker, sends reqs one at a time and returns every event
// line it wrote, normalised, until it exits on stdin EOF.
func replay(t *testing.T, rt *supervisor.Runtime, hostConfig string, reqs []step, start startFunc) []string {
	var got []string // events so far, normalised
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := start(ctx, rt, hostConfig)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdin, stdout := testproc.StartPiped(t, cmd)
	lines := make(chan string)
	readErr := make(chan error, 1) // why lines closed
	exited := make(chan error, 1)  // from Wait, once stdout is read to its end
	go func() {
		defer func() { exited <- cmd.Wait() }()
		defer close(lines)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := readLine(r)
			if err == nil {
				select {
				case lines <- line:
					continue
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			readErr <- err
			_, _ = io.Copy(io.Discard, r) // until the worker is gone
			return
		}
	}()
	defer func() {
		cancel()
		<-exited
	}()
	fail := func(format string, args ...any) {
		t.Helper()
		cancel()
		t.Fatalf(format+"\nevents so far:\n%s\nworker stderr:\n%s",
			append(args, strings.Join(got, "\n"), stderr.String())...)
	}
	// next reads one event; what ends it ends the worker. While it waits,
	// each tick calls onTick (when both are set).
	next := func(limit time.Duration, what string, tick <-chan time.Time, onTick func()) (string, map[string]any) {
		t.Helper()
		timer := time.NewTimer(limit)
		defer timer.Stop()
		for {
			select {
			case <-tick:
				onTick()
				continue
			case line, ok := <-lines:
				if !ok {
					fail("worker stdout ended while waiting for %s: %v", what, <-readErr)
				}
				norm, ev, err := normalize(line)
				if err != nil {
					fail("worker wrote a line that is not an event (%v): %q", err, line)
				}
				got = append(got, norm)
				return norm, ev
			case <-timer.C:
				fail("no event after %s while waiting for %s", limit, what)
			}
		}
	}

	_, ready := next(startTimeout, "ready", nil, nil)
	if ready["type"] != "ready" {
		fail("first event is not ready: %v", ready)
	}
	// A worker that settles says "idle" after each result, once it has
	// cleaned up after the call (docs/protocol.md, Idle): the answer's end.
	settles := ready["settles"] == true
	sent := 0 // SIGUSR2 signals sent, for $SENT
	signal := func() {
		t.Helper()
		sent++
		if err := cmd.Process.Signal(interruptSignal); err != nil {
			fail("interrupt the worker: %v", err)
		}
	}
	// Like the supervisor, interrupt again every 100ms until the call ends:
	// Pyodide can lose a signal that lands as it clears its flag.
	repeat := time.NewTicker(100 * time.Millisecond)
	defer repeat.Stop()
	// Tool calls of the running call that have no answer yet: a run may
	// have several out at once (asyncio.gather), and the worker sends each
	// tool_call in its own time.
	pending := map[string]bool{}
	noteCall := func(ev map[string]any) {
		switch ev["type"] {
		case "tool_call":
			call, _ := ev["call"].(string)
			pending[call] = true
		case "result":
			clear(pending)
		}
	}
	for _, st := range reqs {
		if st.interrupt {
			signal()
			continue
		}
		if st.idle > 0 {
			time.Sleep(st.idle)
			continue
		}
		line := strings.ReplaceAll(st.line, "$SENT", strconv.Itoa(sent))
		var req struct{ Type, Call string }
		_ = json.Unmarshal([]byte(line), &req)
		answer := req.Type == "tool_result"
		if answer {
			// Answer only a call the worker has made: one it has not made
			// yet is a protocol error, however the lines happen to race.
			for !pending[req.Call] {
				_, ev := next(requestTimeout, "tool_call "+req.Call, nil, nil)
				noteCall(ev)
			}
			delete(pending, req.Call)
		}
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			fail("write request: %v", err)
		}
		if answer && len(pending) > 0 {
			continue // the run waits for its other answers: no event is due
		}
		if req.Type == "warm" {
			continue // answered by nothing (docs/protocol.md, Warming calls)
		}
		signalled := !st.interruptAfterOutput
		var tick <-chan time.Time
		for {
			_, ev := next(requestTimeout, "the answer to "+line, tick, signal)
			noteCall(ev)
			typ := ev["type"]
			if typ == "output" && !signalled {
				signal()
				signalled = true
				repeat.Reset(100 * time.Millisecond)
				tick = repeat.C
			}
			if typ == "result" || typ == "pong" || typ == "error" || typ == "need" || typ == "tool_call" {
				if typ == "result" && settles {
					if _, idle := next(requestTimeout, "idle after "+line, nil, nil); idle["type"] != "idle" || idle["id"] != ev["id"] {
						fail("after the result of %s: %v, want idle for the same call", line, idle)
					}
				}
				break
			}
		}
		if !signalled {
			fail("request answered before any output, so it was never interrupted: %s", st.line)
		}
	}
	stdin.Close()
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := <-readErr; !errors.Is(err, io.EOF) {
					fail("read worker stdout: %v", err)
				}
				select {
				case err := <-exited:
					exited <- err // for the deferred wait
					if err != nil {
						fail("worker exit on stdin EOF: %v, want exit status 0", err)
					}
				case <-timer.C:
					fail("worker still running %s after stdin EOF", exitTimeout)
				}
				return got
			}
			fail("worker wrote after its last answer, on stdin EOF: %q", line)
		case <-timer.C:
			fail("worker stdout still open %s after stdin EOF", exitTimeout)
		}
	}
}

// readLine reads one newline-terminated line of at most maxEventLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxEventLine {
			return "", fmt.Errorf("line longer than %d bytes", maxEventLine)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return string(buf[:len(buf)-1]), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return "", fmt.Errorf("output ended mid-line: %q", buf)
		default:
			return "", err
		}
	}
}

// eventTypes are the events of docs/protocol.md.
var eventTypes = map[string]bool{
	"ready": true, "output": true, "package": true, "pong": true, "error": true, "result": true, "need": true,
	"display": true, "file": true,
	"tool_call": true, "idle": true,
}

// volatile are the fields that differ from run to run, each on its event.
var volatile = map[string]string{"startup_ms": "ready", "duration_ms": "result"}

// normalize checks that line is one compact JSON object of a known event type
// and returns it as it was, less its volatile fields, with the rest in their
// original order and spelling.
func normalize(line string) (string, map[string]any, error) {
	var ev map[string]any
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		return "", nil, err
	}
	typ, _ := ev["type"].(string)
	if !eventTypes[typ] {
		return "", nil, fmt.Errorf("unknown event type %q", ev["type"])
	}
	for field, on := range volatile {
		if _, isNum := ev[field].(float64); isNum != (typ == on) {
			return "", nil, fmt.Errorf("%s event: field %s is %v", typ, field, ev[field])
		}
	}
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil { // {
		return "", nil, err
	}
	var b strings.Builder
	b.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", nil, err
		}
		key := tok.(string)
		if _, drop := volatile[key]; drop {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(raw)
	}
	b.WriteByte('}')
	return b.String(), ev, nil
}

// lineDiff lists the lines of want and got that differ, by position.
func lineDiff(want, got string) string {
	w := strings.Split(strings.TrimSuffix(want, "\n"), "\n")
	g := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			continue
		}
		fmt.Fprintf(&b, "line %d:\n", i+1)
		if i < len(w) {
			fmt.Fprintf(&b, "- %s\n", wl)
		}
		if i < len(g) {
			fmt.Fprintf(&b, "+ %s\n", gl)
		}
	}
	return b.String()
}

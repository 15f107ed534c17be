package main

// End-to-end tests of Python sessions (docs/contract.md section 8): state that lasts
// across calls of one session_id, through real MCP clients and real workers.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

// sessionIDPattern is the shape of the ids pyrun mints: the instance, a
// dot, 128 random bits in hex.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,63}\.[0-9a-f]{32}$`)

// inSession calls code in the session id ("new" to start one), with more
// arguments if given, and checks that the result names the session.
func (s *server) inSession(t *testing.T, id, code string, more ...any) result {
	t.Helper()
	args := map[string]any{"python_code": code, "session_id": id}
	for i := 0; i+1 < len(more); i += 2 {
		args[more[i].(string)] = more[i+1]
	}
	r := s.mustCall(t, args)
	if !sessionIDPattern.MatchString(r.sc.SessionID) {
		t.Fatalf("session call: session_id %q is not an instance name, a dot and 32 hex digits\n%s", r.sc.SessionID, r.text)
	}
	if id != "new" && r.sc.SessionID != id {
		t.Fatalf("a call to session %s answered for session %s", id, r.sc.SessionID)
	}
	if !strings.HasPrefix(r.text, "<status>"+r.sc.Status+"</status>\n<session_id>"+r.sc.SessionID+"</session_id>") {
		t.Errorf("the text block does not carry <session_id> right after <status>:\n%s", r.text)
	}
	return r
}

// sessionToolError calls with args and wants a tool error (no result)
// whose text holds every one of want.
func (s *server) sessionToolError(t *testing.T, args map[string]any, want ...string) string {
	t.Helper()
	res, err := s.callRaw(t.Context(), args)
	if err != nil {
		t.Fatalf("call %v: protocol error %v, want a tool error", args, err)
	}
	text := textOf(res)
	if !res.IsError {
		t.Fatalf("call %v: no error:\n%s", args, text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("call %v: the error does not say %q:\n%s", args, w, text)
		}
	}
	return text
}

// TestSessionState carries a variable, a function, an import, a file, an
// asyncio task and a package from a wheelhouse across calls of one
// session over stdio, and shows that stateless calls and other sessions
// see none of it and do not disturb it.
func TestSessionState(t *testing.T) {
	wheels := t.TempDir()
	packagestest.Wheel{Name: "pyrun-demo", Version: "1.0",
		Files: map[string]string{"pyrun_demo/__init__.py": "VERSION = '1.0'\n"}}.Write(t, wheels)
	s := newServer(t, "--workers", "1", "--wheelhouse", wheels, "--network", "none")

	r := s.inSession(t, "new", `
import json
import pyrun_demo
x = 41
def f():
    return x + 1
with open("notes.txt", "w") as fh:
    fh.write("kept")
import asyncio
ticks = 0
async def tick():
    global ticks
    while True:
        ticks += 1
        await asyncio.sleep(0.01)
task = asyncio.ensure_future(tick())
print("started")
`)
	wantStatus(t, r, "success")
	id := r.sc.SessionID
	if len(r.sc.Dependencies) != 1 || r.sc.Dependencies[0] != "pyrun-demo" {
		t.Errorf("dependencies of the first call: %v", r.sc.Dependencies)
	}

	// Stateless calls and another session see nothing of it.
	wantStatus(t, s.run(t, "x"), "run-error")
	wantValue(t, s.run(t, "import os\nos.path.exists('notes.txt')"), "false")
	other := s.inSession(t, "new", "'x' in globals(), __import__('os').path.exists('notes.txt')")
	wantValue(t, other, "[false, false]")
	if other.sc.SessionID == id {
		t.Fatalf("two new sessions got one id %s", id)
	}
	s.inSession(t, other.sc.SessionID, "x = 'other'")

	r = s.inSession(t, id, `
await asyncio.sleep(0.1)
[f(), json.dumps({"a": 1}), open("notes.txt").read(), pyrun_demo.VERSION, ticks > 0, task.done()]
`)
	wantValue(t, r, `[42, "{\"a\": 1}", "kept", "1.0", true, false]`)
	if len(r.sc.Dependencies) != 0 {
		t.Errorf("the package was loaded again: %v", r.sc.Dependencies)
	}
	// global_variables add to the session.
	r = s.inSession(t, id, "x = x + y\nf()", "global_variables", map[string]any{"y": 100})
	wantValue(t, r, "142")
	wantValue(t, s.inSession(t, other.sc.SessionID, "x"), `"other"`)

	// end_session runs the code first, then ends the session.
	r = s.inSession(t, id, "x", "end_session", true)
	wantValue(t, r, "141")
	s.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id},
		id, "ended", `session_id "new"`)
	r = s.inSession(t, other.sc.SessionID, "", "end_session", true)
	wantStatus(t, r, "success")
}

// TestSessionOrder: calls to one session run one at a time, in the order
// they arrive.
func TestSessionOrder(t *testing.T) {
	s := newServer(t, "--workers", "1")
	id := s.inSession(t, "new", "order = []\nn = 0").sc.SessionID
	// The first call holds the session while the others queue behind it,
	// each sent once the one before is in line. Each reads n, awaits, and
	// writes n + 1: calls that overlapped would lose updates.
	const calls = 5
	var wg sync.WaitGroup
	results := make([]result, calls)
	errs := make([]error, calls)
	for i := range calls {
		code := fmt.Sprintf("import asyncio\nm = n\nawait asyncio.sleep(%s)\nn = m + 1\norder.append(%d)", map[bool]string{true: "1", false: "0.05"}[i == 0], i)
		if i == 0 {
			// It tells the worker's stderr, which pyrun logs, that it runs.
			code = "import js\njs.console.error('first call running')\n" + code
		}
		wg.Go(func() {
			results[i], errs[i] = s.call(t.Context(), map[string]any{"python_code": code, "session_id": id})
		})
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		err := s.log.waitFor(ctx, fmt.Sprintf("call %d running or in line", i), func(c map[string]int) bool {
			if i == 0 {
				return c["first call running"] >= 1
			}
			return c["session call waits its turn"] >= i
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		wantStatus(t, results[i], "success")
	}
	wantValue(t, s.inSession(t, id, "order, n"), "[[0, 1, 2, 3, 4], 5]")
}

// TestSessionTimeoutAndLoss: a call past its limit that the interrupt
// stops keeps the session's state; one that must be killed loses it, and
// the result and every later call say so.
func TestSessionTimeoutAndLoss(t *testing.T) {
	// Without checkpoints: with them, the session goes back to its last
	// one instead (durable_test.go).
	s := newServer(t, "--workers", "1", "--session-store", "none")
	id := s.inSession(t, "new", "x = 1").sc.SessionID

	r := s.inSession(t, id, "x = 2\nwhile True:\n    pass", "timeout_seconds", 1)
	wantStatus(t, r, "timeout")
	wantValue(t, s.inSession(t, id, "x"), "2")

	// Python ignores the interrupt: the worker is killed.
	r = s.inSession(t, id, "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass",
		"timeout_seconds", 1)
	wantStatus(t, r, "timeout")
	for _, w := range []string{id, "lost", "state", `session_id "new"`} {
		if !strings.Contains(*r.sc.Error, w) {
			t.Errorf("the result of the killed call does not say %q:\n%s", w, *r.sc.Error)
		}
	}
	s.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id}, id, "lost", `session_id "new"`)

	// A crash mid-session.
	id = s.inSession(t, "new", "x = 1").sc.SessionID
	r = s.inSession(t, id, "import js\njs.Deno.exit(7)")
	wantStatus(t, r, "crashed")
	if !strings.Contains(*r.sc.Error, "lost") {
		t.Errorf("the result of the crash does not say the session is lost:\n%s", *r.sc.Error)
	}
	s.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id}, id, "lost")
	// Stateless calls never noticed.
	wantValue(t, s.run(t, "6 * 7"), "42")
}

// TestSessionErrors: every way a call to a session can fail is a tool
// error that says why and how to go on.
func TestSessionErrors(t *testing.T) {
	s := newServer(t, "--workers", "1", "--max-sessions", "1", "--session-idle", "2s", "--instance-id", "box-1")
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "box-1.00000000000000000000000000000000"},
		"unknown", `session_id "new"`)
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "nonsense"}, "unknown", `session_id "new"`)
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "box-2.0123456789abcdef0123456789abcdef"},
		`instance "box-2"`, `instance "box-1"`)
	s.sessionToolError(t, map[string]any{"python_code": "1", "end_session": true}, "end_session needs the session_id")
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": ""}, "session_id")

	r := s.inSession(t, "new", "1")
	id := r.sc.SessionID
	if !strings.HasPrefix(id, "box-1.") {
		t.Errorf("session id %s does not start with the instance id", id)
	}
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "new"}, "too many", "max_sessions")

	// Idle past --session-idle: the session expires.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the session to expire", func(c map[string]int) bool {
		return c["session ended"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": id}, id, "expired", "session_idle", `session_id "new"`)
	// Its place is free again.
	wantValue(t, s.inSession(t, "new", "2"), "2")
}

// TestSessionIsolationProcess: with --isolation process a session is one
// process for its lifetime.
func TestSessionIsolationProcess(t *testing.T) {
	s := newServer(t, "--workers", "1", "--isolation", "process")
	id := s.inSession(t, "new", "x = [0]").sc.SessionID
	s.inSession(t, id, "x.append(len(x))")
	wantValue(t, s.inSession(t, id, "x[1:]"), "[1]")
	// Stateless calls still get a fresh worker each.
	wantStatus(t, s.run(t, "x"), "run-error")
}

// TestSessionMaxAge: a session ends --session-max-age after it started,
// however busy it is.
func TestSessionMaxAge(t *testing.T) {
	s := newServer(t, "--workers", "1", "--session-max-age", "2s", "--session-idle", "1h")
	id := s.inSession(t, "new", "x = 1").sc.SessionID
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the session to reach its maximum age", func(c map[string]int) bool {
		return c["session ended"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	s.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id}, id, "maximum age", "session_max_age", `session_id "new"`)
}

// TestSessionOptions: the sessions' flags refuse what they cannot mean.
func TestSessionOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--session-idle", "0s"}, "session-idle must be positive"},
		{[]string{"--session-max-age", "-1s"}, "session-max-age must be positive"},
		{[]string{"--max-sessions", "0"}, "max-sessions must be between 1 and 4096"},
		{[]string{"--client-max-sessions", "5000"}, "client-max-sessions must be between 1 and 4096"},
		{[]string{"--sessions-per-worker", "0"}, "sessions-per-worker must be between 1 and 256"},
		{[]string{"--max-session-workers", "0"}, "max-session-workers must be between 1 and 256"},
		{[]string{"--client-max-session-workers", "-1"}, "client-max-session-workers must be between 0 and 256"},
		{[]string{"--session-worker", "mine"}, `session-worker must be "shared" or "own", not "mine"`},
		{[]string{"--instance-id", "box.1"}, "only letters, digits and '-'"},
		{[]string{"--instance-id", strings.Repeat("x", 64)}, "1 to 63 characters"},
		{[]string{"--session-lease", "500ms"}, "session-lease must be between 1s and 10m"},
		{[]string{"--session-move-wait", "0s"}, "session-move-wait must be positive"},
		{[]string{"--checkpoint-delay", "0s"}, "checkpoint-delay must be positive"},
		{[]string{"--session-store", "s3://bucket"}, `session-store must be dir:PATH, redis://HOST:PORT/DB or none, not "s3://bucket"`},
		{[]string{"--session-store", "dir:"}, "session-store must be dir:PATH"},
		{[]string{"--session-store", "redis://127.0.0.1:6379/0"}, "needs --session-store-key-file"},
		{[]string{"--session-store", "redis://127.0.0.1:6379/x", "--session-store-key-file", "k"}, "session-store: "},
	} {
		_, _, err := loadOptions("serve", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	o, _, err := loadOptions("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every language's sessions are namespaces by default; with own
	// workers a session is a worker, so --max-session-workers bounds them.
	py, r := o.sessionLimits(lang.Python), o.sessionLimits(lang.R)
	if o.instance() == "" || py.Max != 256 || py.ClientMax != 64 || py.MaxHosts != 4 || r != py {
		t.Errorf("defaults: instance %q, Python limits %+v, R limits %+v", o.instance(), py, r)
	}
	for _, l := range []lang.Language{lang.Python, lang.R, lang.JavaScript} {
		if !o.sharedSessions(l) {
			t.Errorf("by default, %s sessions should share workers", l.Title)
		}
	}
	own, _, err := loadOptions("serve", []string{"--session-worker", "own"})
	if err != nil {
		t.Fatal(err)
	}
	if r := own.sessionLimits(lang.R); own.sharedSessions(lang.R) || r.Max != 4 || r.ClientMax != 4 {
		t.Errorf("--session-worker own: R sessions shared %v, limits %+v; want a worker each, 4 at most", own.sharedSessions(lang.R), r)
	}
	share, _, err := loadOptions("serve", []string{"--client-max-session-workers", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if py.ClientMaxHosts != 0 || share.sessionLimits(lang.Python).ClientMaxHosts != 3 {
		t.Errorf("client-max-session-workers: %d by default, %d given 3; want 0 (half of max-session-workers) and 3",
			py.ClientMaxHosts, share.sessionLimits(lang.Python).ClientMaxHosts)
	}
	if o.store.Lease != 10*time.Second || o.sessions.MoveWait != 30*time.Second {
		t.Errorf("defaults: session-lease %s, session-move-wait %s; want 10s and 30s", o.store.Lease, o.sessions.MoveWait)
	}
}

// TestSessionWorkerKilledWhileIdle: a session whose worker is killed from
// outside (an administrator, the kernel's OOM killer) while no call runs
// ends at once, and its next call says the state is lost.
func TestSessionWorkerKilledWhileIdle(t *testing.T) {
	// Without checkpoints (see durable_test.go for with).
	s := newServer(t, "--workers", "1", "--session-store", "none")
	id := s.inSession(t, "new", "x = 1").sc.SessionID
	killPID(t, s.lastSessionWorkerPID(t))
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the session to end", func(c map[string]int) bool {
		return c["session ended"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	s.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id}, id, "lost", `session_id "new"`)
	wantValue(t, s.inSession(t, "new", "2"), "2")
}

// lastSessionWorkerPID is the pid of the session worker that became ready
// last, from pyrun's log.
func (s *server) lastSessionWorkerPID(t *testing.T) int {
	t.Helper()
	pid := 0
	for _, line := range strings.Split(s.log.tail(), "\n") {
		var rec struct {
			Message string `json:"@message"`
			PID     int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "dedicated worker ready" {
			pid = rec.PID
		}
	}
	if pid == 0 {
		t.Fatal("no pid in the log's 'dedicated worker ready' line")
	}
	return pid
}

// TestSessionIdleCPU: a Python session whose asyncio task, and a
// JavaScript session whose timer, keep burning a CPU between calls are
// ended, and their next call says why; a session whose task sleeps
// between its ticks is kept, its task still running.
//
// With --session-worker own: on a shared session worker the burner would
// take the quiet session with it (docs/sessions.md).
func TestSessionIdleCPU(t *testing.T) {
	s := newServer(t, "--workers", "1", "--languages", "python,javascript", "--idle-cpu", "0.1", "--session-worker", "own")
	burner := s.inSession(t, "new", `import asyncio
async def burn():
    while True:
        sum(range(20000))
        await asyncio.sleep(0)
task = asyncio.ensure_future(burn())
"armed"`)
	wantValue(t, burner, `"armed"`)
	quiet := s.inSession(t, "new", `import asyncio
ticks = 0
async def tick():
    global ticks
    while True:
        ticks += 1
        await asyncio.sleep(0.5)
task = asyncio.ensure_future(tick())
"armed"`)
	wantValue(t, quiet, `"armed"`)
	js, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{"session_id": "new",
		"javascript_code": `setInterval(() => { const end = Date.now() + 90; while (Date.now() < end) {} }, 100); "armed"`})
	if err != nil || js.sc.SessionID == "" {
		t.Fatalf("JavaScript session: %v %+v", err, js)
	}
	wantValue(t, js, `"armed"`)

	ctx, cancel := context.WithTimeout(t.Context(), 2*callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the burning sessions to end", func(c map[string]int) bool {
		return c["session ended"] >= 2
	}); err != nil {
		t.Fatal(err)
	}
	why := []string{"kept using CPU between calls", "--idle-cpu allows 10%", `session_id "new"`}
	s.sessionToolError(t, map[string]any{"python_code": "task", "session_id": burner.sc.SessionID}, why...)
	res, err := s.callToolRaw(t.Context(), "run_javascript_code", map[string]any{"javascript_code": "1", "session_id": js.sc.SessionID})
	if err != nil || !res.IsError {
		t.Fatalf("the JavaScript session's next call: %v %+v", err, res)
	}
	for _, w := range why {
		if !strings.Contains(textOf(res), w) {
			t.Errorf("the JavaScript session's next call does not say %q:\n%s", w, textOf(res))
		}
	}
	// The quiet one's task ran all along.
	r := s.inSession(t, quiet.sc.SessionID, "ticks > 4 and not task.done()")
	wantValue(t, r, "true")
}

// killPID kills the process pid (a worker) at once, as the kernel's OOM
// killer or a crash would.
func killPID(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

// gonePID says whether the process pid has ended and been reaped.
func gonePID(pid int) bool {
	p, err := os.FindProcess(pid)
	return err != nil || p.Signal(syscall.Signal(0)) != nil
}

package sessions_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Sessions as namespaces on shared workers (Options.PerHost, shared.go).

// callAs runs code in session id as client, and fails the test on an error.
func callAs(t *testing.T, m *sessions.Manager, client, id, code string) supervisor.Result {
	t.Helper()
	res, err := m.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: code, Code: code, Client: client}}, nil)
	if err != nil {
		t.Fatalf("%s: call %q in %s: %v", client, code, id, err)
	}
	if res.Status != supervisor.StatusSuccess {
		t.Fatalf("%s: call %q in %s: %s: %s", client, code, id, res.Status, res.Error)
	}
	return res
}

func output(r supervisor.Result) string {
	var b strings.Builder
	for _, c := range r.Output {
		b.WriteString(c.Text)
	}
	return b.String()
}

func compact(s string) string { return strings.Join(strings.Fields(s), "") }

// Two sessions of one client share a worker, started once, and keep their
// own globals, files (working directory, /output/, /tmp), current directory,
// modules, random state, environment and asyncio tasks' output.
func TestSharedSessionsKeepTheirOwnState(t *testing.T) {
	m, _ := managerOn(t, sessions.Limits{}, 8)
	a := callAs(t, m, "alice", sessions.NewSession, `
import os, sys, types, random, asyncio
x = "a"
open("f.txt", "w").write("a's file")
open("/tmp/t.txt", "w").write("a's tmp")
os.makedirs("/output", exist_ok=True)
open("/output/a.png", "wb").write(b"a")
os.makedirs("sub")
os.chdir("sub")
os.environ["WHO"] = "a"
sys.modules["mine"] = types.ModuleType("mine")
sys.modules["mine"].v = "a"
random.seed(7)
first = random.random()
async def chatter():
    while True:
        print("chatter of a")
        await asyncio.sleep(0.02)
task = asyncio.get_event_loop().create_task(chatter())
`)
	started := m.Stats()
	b := callAs(t, m, "alice", sessions.NewSession, `
import os, sys, random, asyncio
await asyncio.sleep(0.2)
[
    "x" in globals(),
    os.path.exists("f.txt") or os.path.exists("/tmp/t.txt") or os.path.exists("/output/a.png"),
    os.getcwd(),
    os.environ.get("WHO"),
    "mine" in sys.modules,
]`)
	if b.Worker != a.Worker {
		t.Errorf("two sessions of one client ran on %s and %s, want one worker", a.Worker, b.Worker)
	}
	if st := m.Stats(); st.Hosts != 1 || st.Placed != 1 || st.HostStarts != started.HostStarts {
		t.Errorf("the second session: %d hosts, %d placed, %d host starts (before: %d); want it placed on the first's worker", st.Hosts, st.Placed, st.HostStarts, started.HostStarts)
	}
	if got := compact(b.Value); got != `[false,false,"/home/pyodide",null,false]` {
		t.Errorf("the second session sees %s, want none of the first's state", got)
	}
	if strings.Contains(output(b), "chatter of a") {
		t.Errorf("the second session's call got output of the first's task: %q", output(b))
	}
	callAs(t, m, "alice", b.SessionID, `
import random, os
x = "b"
random.seed(99)
open("f.txt", "w").write("b's file")
os.environ["WHO"] = "b"`)
	got := callAs(t, m, "alice", a.SessionID, `
import asyncio
await asyncio.sleep(0.1)
r = random.Random(7); r.random()
[x, open("../f.txt").read(), open("/tmp/t.txt").read(), os.listdir("/output"), os.getcwd(),
 os.environ["WHO"], sys.modules["mine"].v, random.random() == r.random()]`)
	if v := compact(got.Value); v != `["a","a'sfile","a'stmp",["a.png"],"/home/pyodide/sub","a","a",true]` {
		t.Errorf("the first session, back: %s", v)
	}
	if !strings.Contains(output(got), "chatter of a") {
		t.Errorf("the first session's task's output did not reach its own call: %q", output(got))
	}
	if v := compact(callAs(t, m, "alice", b.SessionID, `[x, open("f.txt").read()]`).Value); v != `["b","b'sfile"]` {
		t.Errorf("the second session, back: %s", v)
	}
	// An ended session's namespace is dropped: its task stops.
	if _, err := m.Run(t.Context(), sessions.Call{Session: a.SessionID, End: true, Job: supervisor.Job{ID: "end", Client: "alice"}}, nil); err != nil {
		t.Fatal(err)
	}
	callAs(t, m, "alice", b.SessionID, "1")
	quiet := callAs(t, m, "alice", b.SessionID, "import asyncio\nawait asyncio.sleep(0.1)\nimport os\nos.listdir('/sessions')")
	if strings.Contains(output(quiet), "chatter") || strings.Contains(quiet.Value, "s1") {
		t.Errorf("after the first session ended: output %q, kept namespaces %s", output(quiet), quiet.Value)
	}
}

// Sessions of two clients never share a worker; a worker that is lost
// takes its sessions with it, each saying so; and the limits refuse
// clearly.
func TestSharedSessionsClientsAndLoss(t *testing.T) {
	m, _ := managerOn(t, sessions.Limits{ClientMax: 2, MaxHosts: 2, Spares: -1}, 8)
	a1 := callAs(t, m, "alice", sessions.NewSession, "x = 1")
	a2 := callAs(t, m, "alice", sessions.NewSession, "x = 2")
	b1 := callAs(t, m, "bob", sessions.NewSession, "x = 3")
	if b1.Worker == a1.Worker || a1.Worker != a2.Worker {
		t.Errorf("alice's sessions on %s and %s, bob's on %s: want alice's together, bob's apart", a1.Worker, a2.Worker, b1.Worker)
	}
	_, err := m.Run(t.Context(), sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "3rd", Code: "1", Client: "alice"}}, nil)
	if !errors.Is(err, sessions.ErrTooMany) || !strings.Contains(err.Error(), "client_max_sessions") {
		t.Errorf("alice's third session with ClientMax 2: %v", err)
	}
	_, err = m.Run(t.Context(), sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "carol", Code: "1", Client: "carol"}}, nil)
	if !errors.Is(err, sessions.ErrTooMany) || !strings.Contains(err.Error(), "max_session_workers") {
		t.Errorf("carol's session with two hosts busy and MaxHosts 2: %v", err)
	}
	// Ignores interrupts: the worker is killed past its time limit.
	res, err := m.Run(t.Context(), sessions.Call{Session: a1.SessionID, Job: supervisor.Job{
		ID: "stuck", Client: "alice", Timeout: time.Second,
		Code: "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass",
	}}, nil)
	if err != nil || !strings.Contains(res.Error, "was lost") {
		t.Errorf("the call that lost alice's worker: %v, %s %q", err, res.Status, res.Error)
	}
	wantRefusal(t, m, sessions.Call{Session: a2.SessionID, Job: supervisor.Job{ID: "after", Code: "x", Client: "alice"}}, sessions.ErrLost, "alice's other session on the lost worker")
	if v := callAs(t, m, "bob", b1.SessionID, "x").Value; v != "3" {
		t.Errorf("bob's session after alice's worker was lost: %s", v)
	}
}

// A session ended by its last call (end_session with code) is forgotten
// as soon as that call's result is out: its tasks stop then, not at the
// worker's next call; the next session on the worker starts with none of
// its state, and a session switched out meanwhile keeps all of its own.
func TestSharedSessionEndedByItsLastCall(t *testing.T) {
	m, _ := managerOn(t, sessions.Limits{}, 8)
	kept := callAs(t, m, "alice", sessions.NewSession, "import os\ny = 'kept'\nopen('k.txt', 'w').write('kept file')")
	a := callAs(t, m, "alice", sessions.NewSession, `
import os, sys, types, asyncio, json
x = "a"
open("f.txt", "w").write("a's file")
os.makedirs("sub")
os.chdir("sub")
os.environ["WHO"] = "a"
sys.modules["mine"] = types.ModuleType("mine")
json.ticks = 0  # json is shared by the worker's sessions: the task's ticks show when it stops
async def tick():
    while True:
        json.ticks += 1
        await asyncio.sleep(0.01)
task = asyncio.get_event_loop().create_task(tick())
await asyncio.sleep(0.05)`)
	last, err := m.Run(t.Context(), sessions.Call{Session: a.SessionID, End: true,
		Job: supervisor.Job{ID: "last", Client: "alice", Code: "import json\njson.ticks"}}, nil)
	if err != nil || last.Status != supervisor.StatusSuccess {
		t.Fatalf("the session's last call: %v, %s %s", err, last.Status, last.Error)
	}
	ticksAtEnd, _ := strconv.Atoi(last.Value)
	if ticksAtEnd == 0 {
		t.Fatalf("the session's task had not ticked by its last call: %q", last.Value)
	}
	time.Sleep(300 * time.Millisecond) // about 30 ticks, were the task still running
	next := callAs(t, m, "alice", sessions.NewSession, `
import os, sys, json
[json.ticks, "x" in globals(), os.path.exists("f.txt"), os.getcwd(), os.environ.get("WHO"),
 "mine" in sys.modules, sorted(os.listdir("/sessions"))]`)
	if next.Worker != a.Worker {
		t.Fatalf("the next session ran on %s, the ended one on %s: want one worker", next.Worker, a.Worker)
	}
	var got []any
	if err := json.Unmarshal([]byte(next.Value), &got); err != nil || len(got) != 7 {
		t.Fatalf("the next session's view: %q (%v)", next.Value, err)
	}
	if ticks, _ := got[0].(float64); int(ticks) > ticksAtEnd+3 {
		t.Errorf("the ended session's task ticked %d times after its last call (%d then): it ran on until the next call", int(ticks)-ticksAtEnd, ticksAtEnd)
	}
	if v, _ := json.Marshal(got[1:6]); string(v) != `[false,false,"/home/pyodide",null,false]` {
		t.Errorf("the next session sees %s of the ended one's state, want none", v)
	}
	if v, _ := json.Marshal(got[6]); string(v) != `["s1"]` {
		t.Errorf("sessions kept on the worker: %s, want only the one switched out (s1)", v)
	}
	if v := compact(callAs(t, m, "alice", kept.SessionID, "[y, open('k.txt').read(), os.getcwd()]").Value); v != `["kept","keptfile","/home/pyodide"]` {
		t.Errorf("the session switched out meanwhile: %s", v)
	}
	wantRefusal(t, m, sessions.Call{Session: a.SessionID, Job: supervisor.Job{ID: "after", Client: "alice", Code: "x"}}, sessions.ErrEnded, "a call to the ended session")
}

// Sessions of one client on one shared worker share its event loop, as
// docs/sessions.md and docs/security.md say: a session sees the asyncio
// tasks another left running (asyncio.all_tasks()) and, through a task's
// coroutine, that session's globals. This is documented, not a boundary
// (the interpreter is one); the advice for users who must not see each
// other behind one client's credentials is --session-worker own, where a
// session's worker holds it alone: the control, where the other session
// sees no task but its own.
func TestSharedSessionsOfOneClientSeeEachOthersTasks(t *testing.T) {
	const leave = `
import asyncio
secret = "alice's secret"
async def waits():
    await asyncio.sleep(3600)
task = asyncio.ensure_future(waits())`
	const peek = `
import asyncio
[t.get_coro().cr_frame.f_globals.get("secret") for t in asyncio.all_tasks(asyncio.get_event_loop())
 if getattr(t.get_coro(), "__name__", "") == "waits"]`
	for _, tc := range []struct {
		what    string
		perHost int
		want    string
	}{
		{"a shared worker (--session-worker shared)", 8, `["alice'ssecret"]`},
		{"a worker of its own (--session-worker own)", 0, `[]`},
	} {
		t.Run(tc.what, func(t *testing.T) {
			m, _ := managerOn(t, sessions.Limits{Spares: -1}, tc.perHost)
			callAs(t, m, "alice", sessions.NewSession, leave)
			other := callAs(t, m, "alice", sessions.NewSession, "1").SessionID
			if got := compact(callAs(t, m, "alice", other, peek).Value); got != tc.want {
				t.Errorf("the other session of the same client, on %s, sees of the first's tasks: %s, want %s", tc.what, got, tc.want)
			}
		})
	}
}

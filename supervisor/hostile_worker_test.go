package supervisor_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// Worker-level attacks of issue 12's red-team pass, each run on a pool of
// one worker, so that every call after the attack runs where it ran (unless
// pyrun replaced the worker). Each test logs the figure the issue quotes
// (later calls reached, bytes logged, ...) and asserts the bound.

// laterCalls is how many calls after an attack each test looks at.
const laterCalls = 5

// TestHostileWriteGuard: every way the red team found past the "wrote
// outside the working directory and /tmp" check plants a module in
// site-packages; no later call may import it.
func TestHostileWriteGuard(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1})
	const site = "import sys\nsite = next(p for p in sys.path if p.endswith('site-packages'))\n"
	for _, tc := range []struct{ name, code string }{
		{"the helper's loading flag", site + `
import pyrun_helper
pyrun_helper._active.loading = True
open(site + "/pyrun_evil.py", "w").write("EVIL = True\n")`},
		{"dir_fd", site + `
import os
fd = os.open(site, os.O_RDONLY)
out = os.open("pyrun_evil.py", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
os.write(out, b"EVIL = True\n")
os.close(out)`},
		{"symlink and chdir", site + `
import os
os.symlink(site, "/tmp/pyrun_link")
os.chdir("/tmp/pyrun_link")
open("pyrun_evil.py", "w").write("EVIL = True\n")`},
		{"a symlink in the working directory", site + `
import os
os.symlink(site, "link")
open("link/pyrun_evil.py", "w").write("EVIL = True\n")`},
		{"os.replace", site + `
import os
open("/tmp/pyrun_evil.py", "w").write("EVIL = True\n")
os.replace("/tmp/pyrun_evil.py", site + "/pyrun_evil.py")`},
		{"a callback that writes while the worker is idle", site + `
import asyncio
def plant():
    open(site + "/pyrun_evil.py", "w").write("EVIL = True\n")
asyncio.get_event_loop().call_later(0.3, plant)
'armed'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The attack is refused (PermissionError) or, where it has
			// nothing to refuse yet (a callback armed), succeeds.
			res := hostileRun(t, p, tc.code, nil, 30*time.Second)
			if res.Status != supervisor.StatusSuccess && !strings.Contains(res.Error, "PermissionError") {
				t.Fatalf("the attack: %s %s", res.Status, res.Error)
			}
			reached := 0
			for range laterCalls {
				next := hostileRun(t, p, "import asyncio\nawait asyncio.sleep(0.1)\nimport pyrun_evil\npyrun_evil.EVIL", nil, 30*time.Second)
				if next.Status == supervisor.StatusSuccess {
					reached++
				} else if !strings.Contains(next.Error, "ModuleNotFoundError") {
					t.Errorf("a later call: %s %s", next.Status, next.Error)
				}
			}
			t.Logf("the planted module answered %d of %d later calls", reached, laterCalls)
			if reached > 0 {
				t.Errorf("the planted module answered %d of %d later calls; want none", reached, laterCalls)
			}
		})
	}
}

// TestHostileInterpreterHooks: audit hooks, trace and profile functions and
// sys.monitoring tools a call installs must not reach the calls after it.
func TestHostileInterpreterHooks(t *testing.T) {
	// Each attack records, in a module attribute (which outlives the call),
	// the user code it sees run; each later call runs a function of its own
	// and reports how much was recorded.
	const probe = "import math\ndef victim():\n    return 1\nvictim()\nlen(getattr(math, 'pyrun_seen', []))"
	for _, tc := range []struct{ name, code string }{
		{"an audit hook that records", `
import sys, math
math.pyrun_seen = []
sys.addaudithook(lambda e, a: math.pyrun_seen.append(e) if e in ("exec", "compile") else None)`},
		{"an audit hook that raises", `
import sys
def hook(e, a):
    if e == "exec":
        raise ValueError("hooked")
sys.addaudithook(hook)`},
		{"an audit hook after patching pyrun's", `
import sys, gc, pyrun_helper
def noop(e, a, *rest, **kw):
    return None
for f in [o for o in gc.get_objects() if getattr(o, "__name__", "") == "refuse"]:
    for attr, value in (("__code__", noop.__code__), ("__defaults__", None)):
        try:
            setattr(f, attr, value)
        except Exception:
            pass
import math
math.pyrun_seen = []
sys.addaudithook(lambda e, a: math.pyrun_seen.append(e) if e == "exec" else None)`},
		{"sys.settrace", `
import sys, math
math.pyrun_seen = []
def tracer(frame, event, arg):
    if frame.f_code.co_name == "victim":
        math.pyrun_seen.append(event)
    return None
sys.settrace(tracer)`},
		{"sys.setprofile", `
import sys, math
math.pyrun_seen = []
sys.setprofile(lambda frame, event, arg: math.pyrun_seen.append(event) if frame.f_code.co_name == "victim" else None)`},
		{"sys.monitoring", `
import sys, math
math.pyrun_seen = []
mon = sys.monitoring
mon.use_tool_id(3, "spy")
mon.register_callback(3, mon.events.PY_START, lambda code, off: math.pyrun_seen.append(code.co_name) if code.co_name == "victim" else None)
mon.set_events(3, mon.events.PY_START)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := realPool(t, supervisor.Config{Workers: 1}) // each attack on a worker of its own
			res := hostileRun(t, p, tc.code, nil, 30*time.Second)
			if res.Status != supervisor.StatusSuccess {
				t.Fatalf("the attack: %s %s", res.Status, res.Error)
			}
			reached, seen := 0, -1
			for range laterCalls {
				next := hostileRun(t, p, probe, nil, 30*time.Second)
				if next.Status != supervisor.StatusSuccess {
					reached++ // the hook broke it
					continue
				}
				var n int
				if err := json.Unmarshal([]byte(next.Value), &n); err != nil {
					t.Fatalf("value %q", next.Value)
				}
				if seen >= 0 && n > seen {
					reached++ // the hook saw this call's code
				}
				seen = n
			}
			t.Logf("the hook reached %d of %d later calls", reached, laterCalls)
			if reached > 0 {
				t.Errorf("the hook reached %d of %d later calls; want none", reached, laterCalls)
			}
		})
	}
	t.Run("the refusal is said", func(t *testing.T) {
		p := realPool(t, supervisor.Config{Workers: 1})
		res := hostileRun(t, p, "import sys\nsys.addaudithook(lambda e, a: None)\n'done'", nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess || !strings.Contains(res.Stderr, "sys.addaudithook refused") {
			t.Errorf("%s, stderr %q: %s", res.Status, res.Stderr, res.Error)
		}
	})
}

// TestHostileTinyTimeout: a call's own limit below the minimum is rounded
// up to it: 100 ns used to pass before the worker read the call, which
// ended crashed and killed the worker.
func TestHostileTinyTimeout(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1})
	waitReady(t, p, 1)
	before := restarts(p.Stats())
	for i := range 3 {
		res := hostileRun(t, p, fmt.Sprintf("%d + 1", i), nil, 100*time.Nanosecond)
		if res.Status != supervisor.StatusSuccess {
			t.Errorf("a quick call with a 100 ns limit: %s %s", res.Status, res.Error)
		}
	}
	res := hostileRun(t, p, "import time\ntime.sleep(10)", nil, time.Nanosecond)
	if res.Status != supervisor.StatusTimeout || !strings.Contains(res.Error, "time limit of 100ms") {
		t.Errorf("a slow call with a 1 ns limit: %s %s", res.Status, res.Error)
	}
	within(t, "the slow call", res.Duration, supervisor.MinCallTimeout, 5*time.Second)
	if n := restarts(p.Stats()); n != before {
		t.Errorf("restarts %v; want none", p.Stats().Counts.Restarts)
	}
}

// TestHostileStderrFlood: what workers write to their stderr reaches
// pyrun's log bounded per call, also with a new worker per call, and per
// second for the whole pool; control characters arrive escaped.
func TestHostileStderrFlood(t *testing.T) {
	const flood = `
import js, os
js.console.log("forged\r[INFO] pyrun: all is well\x1b[2J\x07\u202e")
os.write(2, b"raw \x1b[31mred\x07 and \xff bytes\n")
for i in range(3000):
    js.console.log("x" * 1000)
'flooded'`
	t.Run("per call", func(t *testing.T) {
		out := &syncbuf.Buffer{}
		log := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})
		p, err := supervisor.NewPool(testruntime.Get(t), supervisor.Config{Workers: 1, Isolation: supervisor.IsolationProcess}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(t.Context())
		waitReady(t, p, 1)
		const calls = 3
		for range calls {
			if res := hostileRun(t, p, flood, nil, 30*time.Second); res.Status != supervisor.StatusSuccess {
				t.Fatalf("%s %s", res.Status, res.Error)
			}
		}
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		t.Logf("pyrun logged %d bytes for %d calls that each wrote 3 MB to stderr: %d a call", len(text), calls, len(text)/calls)
		if max := calls * (supervisor.DefaultStderrLogPerCall + 4<<10); len(text) > max {
			t.Errorf("pyrun logged %d bytes; want at most %d", len(text), max)
		}
		for _, c := range []string{"\r", "\x1b", "\x07", "\xff", "\u202e"} {
			if strings.Contains(text, c) {
				t.Errorf("the log holds %q raw", c)
			}
		}
		if !strings.Contains(text, `forged\x0d[INFO]`) || !strings.Contains(text, `raw \x1b[31mred\x07 and`) {
			t.Errorf("the escaped lines are not in the log:\n%s", clipString(text, 3000))
		}
		if !strings.Contains(text, "worker stderr not logged") {
			t.Error("what was held back is not reported")
		}
	})
	t.Run("per second for the pool", func(t *testing.T) {
		out := &syncbuf.Buffer{}
		log := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})
		const rate = 8 << 10
		p, err := supervisor.NewPool(testruntime.Get(t), supervisor.Config{Workers: 2, StderrLogPerCall: 64 << 20, StderrLogRate: rate}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(t.Context())
		waitReady(t, p, 2)
		began := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { hostileRun(t, p, flood, nil, 30*time.Second) })
		}
		wg.Wait()
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		n := len(out.String())
		t.Logf("two workers wrote 6 MB to stderr in %s; pyrun logged %d bytes", took.Round(time.Millisecond), n)
		if max := int(float64(rate)*took.Seconds()) + 2*rate + 4<<10; n > max {
			t.Errorf("pyrun logged %d bytes in %s; want at most %d", n, took, max)
		}
	})
}

// TestHostileLeftBehind: what a call leaves a worker worse off with than a
// fresh one is measured while the worker is idle and gets it replaced:
// a CPU burner kept under the spin threshold, memory held after the
// cleanup, and more threads than a worker may have.
func TestHostileLeftBehind(t *testing.T) {
	t.Run("a CPU burner under the spin threshold", func(t *testing.T) {
		p := realPool(t, supervisor.Config{Workers: 1})
		res := hostileRun(t, p, "1", nil, 30*time.Second)
		// A fresh worker that ran a call is not taken for a burner.
		quiet := restarts(p.Stats())
		time.Sleep(3 * time.Second)
		if n := restarts(p.Stats()); n != quiet {
			t.Fatalf("an idle worker that ran print(1) was replaced: %v", p.Stats().Counts.Restarts)
		}
		// 44 ms of every 100 on a JavaScript thread: under the 50% of a CPU
		// that marks a spinning worker.
		res = hostileRun(t, p, `from pyodide.code import run_js
run_js("new Worker('data:text/javascript,(function burn() { const t = Date.now(); while (Date.now() - t < 44) {} setTimeout(burn, 56) })()', {type: 'module'})")
'armed'`, nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("%s %s", res.Status, res.Error)
		}
		armed := time.Now()
		before := p.Stats().Counts.Restarts[supervisor.RestartRecycle]
		waitLong(t, "the burner's worker replaced", func() bool {
			return p.Stats().Counts.Restarts[supervisor.RestartRecycle] > before
		})
		t.Logf("the burner's worker was replaced %s after the call", time.Since(armed).Round(100*time.Millisecond))
		within(t, "the replacement", time.Since(armed), 0, 20*time.Second)
	})
	t.Run("memory held after the cleanup", func(t *testing.T) {
		p := realPool(t, supervisor.Config{Workers: 1})
		var next supervisor.Result
		for _, leave := range []string{
			// A big file, which the cleanup deletes.
			"open('big', 'wb').write(b'x' * (150 << 20))",
			// A heap grown by 200 MiB and pinned by a small object
			// above the freed block (a module attribute outlives the call).
			"import math\nx = bytearray(200 << 20)\nmath.pyrun_pin = [bytearray(1 << 10) for _ in range(1000)]\ndel x",
		} {
			res := hostileRun(t, p, leave, nil, 30*time.Second)
			if res.Status != supervisor.StatusSuccess {
				t.Fatalf("%s %s", res.Status, res.Error)
			}
			rss := "?"
			if pids := p.WorkerPIDs(); len(pids) == 1 {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pids[0])); err == nil {
					var size, pages int64
					fmt.Sscan(string(b), &size, &pages)
					rss = fmt.Sprintf("%d MiB", pages*int64(os.Getpagesize())>>20)
				}
			}
			// What a fresh worker can do, the next call can.
			next = hostileRun(t, p, "len(bytearray(330 << 20))", nil, 30*time.Second)
			t.Logf("after %q the idle worker's RSS: %s; the next call's 330 MiB: %s on %s", strings.SplitN(leave, "\n", 2)[0], rss, next.Status, next.Worker)
			if next.Status != supervisor.StatusSuccess || next.Worker == res.Worker {
				t.Errorf("the next call: %s on %s (the memory was left on %s): %s", next.Status, next.Worker, res.Worker, clipString(next.Error, 300))
			}
		}
		// A call that leaves little behind keeps its worker.
		small := hostileRun(t, p, "len(bytearray(8 << 20))", nil, 30*time.Second)
		again := hostileRun(t, p, "1", nil, 30*time.Second)
		if small.Worker == next.Worker || again.Worker != small.Worker {
			t.Errorf("workers %s, %s, %s: want a fresh one after the 330 MiB call, then kept", next.Worker, small.Worker, again.Worker)
		}
	})
	t.Run("threads past the limit", func(t *testing.T) {
		p := realPool(t, supervisor.Config{Workers: 1, MaxWorkerThreads: 24})
		res := hostileRun(t, p, `from pyodide.code import run_js
run_js("for (let i = 0; i < 40; i++) new Worker('data:text/javascript,setInterval(() => {}, 1000)', {type: 'module'})")
import time
time.sleep(15)
'survived'`, nil, 30*time.Second)
		if res.Status != supervisor.StatusCrashed || !strings.Contains(res.Error, "more threads") {
			t.Errorf("status %s: %s", res.Status, clipString(res.Error, 500))
		}
		within(t, "the thread bomb", res.Duration, 0, 14*time.Second)
		next := hostileRun(t, p, "1 + 1", nil, 30*time.Second)
		if next.Status != supervisor.StatusSuccess || next.Worker == res.Worker {
			t.Errorf("the next call: %s on %s: %s", next.Status, next.Worker, next.Error)
		}
	})
}

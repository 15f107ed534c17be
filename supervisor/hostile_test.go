package supervisor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// The hostile-code suite: code written to escape the sandbox, starve
// others or take pyrun down, run on real Deno + Pyodide workers. Each case
// is a named subtest; the network cases are in hostile_net_test.go, code
// that takes its own worker down in hostile_crash_test.go.

// canary is set in this process's environment before any worker starts;
// no worker may see it.
const canary = "PYRUN_HOSTILE_CANARY"

// hostileRun runs code with globals (a Go value turned into JSON, or nil)
// and the pool's limits; the call must be answered, whatever it did.
func hostileRun(t *testing.T, p *supervisor.Pool, code string, globals any, timeout time.Duration) supervisor.Result {
	t.Helper()
	job := supervisor.Job{ID: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()), Code: code, Timeout: timeout}
	if globals != nil {
		b, err := json.Marshal(globals)
		if err != nil {
			t.Fatal(err)
		}
		job.Globals = b
	}
	res, err := p.Run(t.Context(), job, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for what, s := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr, "value": res.Value, "error": res.Error} {
		if !utf8.ValidString(s) {
			t.Errorf("%s is not valid UTF-8: %q", what, s)
		}
	}
	return res
}

// denials runs code that fills the dict `out` with the outcome of each
// attempt ("ok: ..." or the exception), and checks that every attempt
// failed with a message containing one of wants.
func denials(t *testing.T, p *supervisor.Pool, code string, globals any, wants ...string) map[string]string {
	t.Helper()
	res := hostileRun(t, p, attemptPrelude+code+"\nout", globals, 30*time.Second)
	if res.Status != supervisor.StatusSuccess {
		t.Fatalf("status %s, error:\n%s\nstdout: %s", res.Status, res.Error, res.Stdout)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(res.Value), &out); err != nil {
		t.Fatalf("value %q: %v", res.Value, err)
	}
	for what, got := range out {
		ok := false
		for _, w := range wants {
			ok = ok || strings.Contains(got, w)
		}
		if !ok {
			t.Errorf("%s: %s; want a refusal (%s)", what, got, strings.Join(wants, " or "))
		}
	}
	if len(out) == 0 {
		t.Error("no attempt was made")
	}
	return out
}

// attemptPrelude defines attempt(name, fn) and await_attempt(name, coro),
// which record in `out` what each try gave.
const attemptPrelude = `
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok: " + str(fn())[:300]
    except BaseException as e:
        out[name] = f"{type(e).__name__}: {e}"[:300]
async def await_attempt(name, aw):
    try:
        out[name] = "ok: " + str(await aw)[:300]
    except BaseException as e:
        out[name] = f"{type(e).__name__}: {e}"[:300]
`

// treeHash hashes every file under dir (names, modes and contents).
func treeHash(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := info.Mode().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			sum += " " + hex.EncodeToString(h[:])
		}
		sums[p] = sum
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return sums
}

func TestHostileCode(t *testing.T) {
	t.Setenv(canary, "canary-"+fmt.Sprint(time.Now().UnixNano()))
	rt := testruntime.Get(t)
	secretFile := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secretFile, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	runtimeRoot := filepath.Dir(rt.Dir)
	p := realPool(t, supervisor.Config{Workers: 2, Timeout: 30 * time.Second})
	// p1 has one worker: each call runs where the one before it ran.
	p1 := realPool(t, supervisor.Config{Workers: 1})
	waitReady(t, p, 2)
	before := treeHash(t, rt.Dir)

	t.Run("host files", func(t *testing.T) {
		out := denials(t, p, `
import js
from pyodide.code import run_js
attempt("python open", lambda: open(secret_file).read())
attempt("python open /etc/passwd", lambda: open("/etc/passwd").read())
attempt("python listdir host", lambda: __import__("os").listdir(secret_dir))
attempt("js read", lambda: js.Deno.readTextFileSync(secret_file))
attempt("js read /etc/passwd", lambda: js.Deno.readTextFileSync("/etc/passwd"))
attempt("js read dir /", lambda: [e.name for e in js.Deno.readDirSync("/")])
attempt("js stat", lambda: js.Deno.statSync(secret_file).size)
attempt("js open", lambda: js.Deno.openSync(secret_file))
attempt("js realpath", lambda: js.Deno.realPathSync(secret_file))
attempt("js read /proc/self/environ", lambda: js.Deno.readTextFileSync("/proc/self/environ"))
attempt("js read /proc/self/exe link", lambda: js.Deno.readLinkSync("/proc/self/exe"))
attempt("js read worker entry", lambda: js.Deno.readTextFileSync(runtime_dir + "/main.ts"))
attempt("js read deno cache", lambda: [e.name for e in js.Deno.readDirSync(runtime_root + "/deno-cache")])
await await_attempt("node fs", run_js("(async (p) => (await import('node:fs')).readFileSync(p, 'utf8'))")(secret_file))
await await_attempt("fetch file url", js.fetch("file://" + secret_file))
await await_attempt("import file", run_js("(p) => import('file://' + p)")(secret_file))
`, map[string]any{"secret_file": secretFile, "secret_dir": filepath.Dir(secretFile), "runtime_dir": rt.Dir, "runtime_root": runtimeRoot},
			"NotCapable", "Requires read access", "No such file or directory", "FileNotFoundError")
		for what, got := range out {
			if strings.Contains(got, "host secret") || strings.Contains(got, "root:") {
				t.Errorf("%s read a host file: %s", what, got)
			}
		}
	})

	t.Run("environment", func(t *testing.T) {
		value := os.Getenv(canary)
		res := hostileRun(t, p, attemptPrelude+`
import os, js
from pyodide.code import run_js
attempt("os.environ", lambda: dict(os.environ))
attempt("getenv", lambda: os.getenv(canary))
attempt("Deno.env.get", lambda: js.Deno.env.get(canary))
attempt("Deno.env.toObject", lambda: js.Deno.env.toObject())
attempt("/proc/self/environ", lambda: js.Deno.readTextFileSync("/proc/self/environ"))
attempt("/proc/ppid/environ", lambda: js.Deno.readTextFileSync(f"/proc/{js.Deno.ppid}/environ"))
await await_attempt("node process.env", run_js("(async () => JSON.stringify((await import('node:process')).default.env))")())
await await_attempt("worker thread env", run_js("""() => new Promise((res) => {
  const w = new Worker('data:text/javascript,try { postMessage(JSON.stringify(Deno.env.toObject())) } catch (e) { postMessage(String(e)) }', {type: 'module'});
  w.onmessage = (e) => { res(e.data); w.terminate(); };
})""")())
out`, map[string]any{"canary": canary}, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("status %s: %s", res.Status, res.Error)
		}
		if strings.Contains(res.Value, value) {
			t.Errorf("the worker saw pyrun's environment: %s", res.Value)
		}
		var out map[string]string
		json.Unmarshal([]byte(res.Value), &out)
		// Python's own environment is Pyodide's defaults, with nothing of the host.
		for k := range map[string]bool{"Deno.env.get": true, "Deno.env.toObject": true, "/proc/self/environ": true, "/proc/ppid/environ": true, "node process.env": true} {
			if !strings.Contains(out[k], "NotCapable") && !strings.Contains(out[k], "Requires") {
				t.Errorf("%s: %s; want a refusal", k, out[k])
			}
		}
		if out["getenv"] != "ok: None" {
			t.Errorf("getenv: %s", out["getenv"])
		}
		// No value of the host's environment is there (short ones may
		// match Pyodide's defaults by chance).
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			if len(v) >= 6 && strings.Contains(out["os.environ"], "'"+v+"'") {
				t.Errorf("os.environ holds the host's %s: %s", k, out["os.environ"])
			}
		}
	})

	t.Run("processes", func(t *testing.T) {
		denials(t, p, `
import js, os, subprocess
from pyodide.code import run_js
attempt("subprocess", lambda: subprocess.run(["id"]))
attempt("os.fork", lambda: os.fork())
attempt("os.execv", lambda: os.execv("/bin/sh", ["sh"]))
attempt("Deno.Command", lambda: run_js("new Deno.Command('/bin/sh', {args: ['-c', 'id']}).outputSync()"))
attempt("Deno.Command spawn", lambda: run_js("new Deno.Command('/usr/bin/id').spawn()"))
attempt("Deno.dlopen", lambda: run_js("Deno.dlopen('libc.so.6', {getpid: {parameters: [], result: 'i32'}})"))
await await_attempt("node child_process", run_js("(async () => (await import('node:child_process')).execFileSync('/bin/id').toString())")())
await await_attempt("node spawn", run_js("(async () => (await import('node:child_process')).spawn('/bin/id').pid)")())
`, nil, "NotCapable", "Requires run access", "Requires ffi access", "Requires env access", "not support processes", "Function not implemented", "Exec format error")
		// os.system reaches Node's child_process inside Pyodide, which
		// fails so badly that Pyodide gives up: the call crashes, nothing runs.
		res := hostileRun(t, p, "import os\nos.system('touch /tmp/pyrun-hostile-ran')", nil, 30*time.Second)
		if res.Status == supervisor.StatusSuccess {
			t.Errorf("os.system succeeded: %+v", res)
		}
		if _, err := os.Stat("/tmp/pyrun-hostile-ran"); err == nil {
			t.Error("os.system started a process on the host")
		}
	})

	t.Run("signals", func(t *testing.T) {
		waitReady(t, p, 2)
		pids := p.WorkerPIDs()
		before := restarts(p.Stats())
		out := denials(t, p, `
import js, os, signal
from pyodide.code import run_js
attempt("Deno.kill pyrun", lambda: js.Deno.kill(js.Deno.ppid, "SIGKILL"))
attempt("os.kill pyrun", lambda: os.kill(js.Deno.ppid, signal.SIGKILL))
# A worker may signal itself (Deno allows that without permission); the
# crash cases cover it. Here: pyrun and the other workers.
for pid in pids:
    if pid == js.Deno.pid:
        continue
    attempt(f"Deno.kill worker {pid}", lambda: js.Deno.kill(pid, "SIGKILL"))
    attempt(f"os.kill worker {pid}", lambda: os.kill(pid, signal.SIGKILL))
attempt("Deno.kill group", lambda: js.Deno.kill(-js.Deno.pid, "SIGKILL"))
await await_attempt("node process.kill", run_js("(async () => (await import('node:process')).default.kill(Deno.ppid, 'SIGKILL'))")())
`, map[string]any{"pids": pids}, "NotCapable", "Requires run access", "Operation not permitted")
		t.Log(out)
		// Both workers are still there, and answer.
		for range 4 {
			if res := hostileRun(t, p, "1", nil, 30*time.Second); res.Status != supervisor.StatusSuccess {
				t.Errorf("a call after the attempts: %s %s", res.Status, res.Error)
			}
		}
		if s := p.Stats(); restarts(s) != before {
			t.Errorf("restarts %v, want none", s.Counts.Restarts)
		}
		if n := strings.Count(fmt.Sprint(out), "Deno.kill worker"); n != 1 {
			t.Errorf("%d other workers tried, want 1", n)
		}
	})

	t.Run("writes into the runtime", func(t *testing.T) {
		pyodideDir := filepath.Join(rt.Dir, "node_modules", "pyodide")
		out := denials(t, p, `
import js
from pyodide.code import run_js
targets = {
    "helper": runtime_dir + "/python/pyrun_helper.py",
    "entry": runtime_dir + "/main.ts",
    "wasm": pyodide_dir + "/pyodide.asm.wasm",
    "lock": pyodide_dir + "/pyodide-lock.json",
    "new file in pyodide": pyodide_dir + "/evil.whl",
    "deno cache": runtime_root + "/deno-cache/evil",
    "work dir": runtime_root + "/work/evil",
    "snapshots": runtime_root + "/snapshots/evil",
    "runtime root": runtime_root + "/evil",
}
for name, path in targets.items():
    attempt(f"write {name}", lambda: js.Deno.writeTextFileSync(path, "evil"))
attempt("remove helper", lambda: js.Deno.removeSync(targets["helper"]))
attempt("rename wasm", lambda: js.Deno.renameSync(targets["wasm"], targets["wasm"] + ".bak"))
attempt("chmod helper", lambda: js.Deno.chmodSync(targets["helper"], 0o777))
attempt("truncate wasm", lambda: js.Deno.truncateSync(targets["wasm"], 0))
attempt("mkdir in runtime", lambda: js.Deno.mkdirSync(runtime_dir + "/evil"))
attempt("symlink", lambda: js.Deno.symlinkSync("/tmp", runtime_dir + "/evil"))
attempt("open for write", lambda: js.Deno.openSync(targets["helper"], {"write": True}))
attempt("utime", lambda: js.Deno.utimeSync(targets["helper"], 0, 0))
await await_attempt("node fs write", run_js("(async (p) => (await import('node:fs')).writeFileSync(p, 'evil'))")(targets["helper"]))
await await_attempt("node fs append", run_js("(async (p) => (await import('node:fs')).appendFileSync(p, 'evil'))")(targets["lock"]))
`, map[string]any{"runtime_dir": rt.Dir, "pyodide_dir": pyodideDir, "runtime_root": runtimeRoot},
			"NotCapable", "Requires write access", "requires unscoped", "Requires read access")
		t.Logf("%d attempts refused", len(out))
		after := treeHash(t, rt.Dir)
		for path, sum := range before {
			if after[path] != sum {
				t.Errorf("%s changed: %s -> %s", path, sum, after[path])
			}
		}
		for path := range after {
			if _, ok := before[path]; !ok {
				t.Errorf("%s appeared in the runtime", path)
			}
		}
		for _, name := range []string{"deno-cache/evil", "work/evil", "snapshots/evil", "evil"} {
			if _, err := os.Stat(filepath.Join(runtimeRoot, name)); err == nil {
				t.Errorf("%s was written", name)
			}
		}
	})

	t.Run("writes into the package folder of the interpreter", func(t *testing.T) {
		// Pyodide's own file system is in memory; outside the scratch
		// folders Python may not change it (more ways in hostile_worker_test.go).
		res := hostileRun(t, p, `
import sys, site
path = next(p for p in sys.path if p.endswith("site-packages"))
open(path + "/pyrun_evil.py", "w").write("EVIL = True\n")`, nil, 30*time.Second)
		if res.Status != supervisor.StatusRunError || !strings.Contains(res.Error, "PermissionError") {
			t.Fatalf("status %s: %s", res.Status, res.Error)
		}
		for range 3 {
			res := hostileRun(t, p, "import pyrun_evil", nil, 30*time.Second)
			if res.Status != supervisor.StatusRunError || !strings.Contains(res.Error, "ModuleNotFoundError") {
				t.Errorf("a later call imported the planted module: %s %s", res.Status, res.Error)
			}
		}
	})

	t.Run("another call's data", func(t *testing.T) {
		// Two calls at once, on two workers: the attacker looks everywhere
		// it can for the victim's secret while the victim holds it.
		secret := fmt.Sprintf("victim-secret-%d", time.Now().UnixNano())
		waitReady(t, p, 2)
		var wg sync.WaitGroup
		var victim, attacker supervisor.Result
		wg.Go(func() {
			victim = hostileRun(t, p, "import time\nkept = secret\nopen('mine.txt', 'w').write(secret)\nopen('/tmp/mine.txt', 'w').write(secret)\nimport js\njs.globalThis.kept = secret\ntime.sleep(1.5)\nkept",
				map[string]any{"secret": secret}, 30*time.Second)
		})
		wg.Go(func() {
			attacker = hostileRun(t, p, attemptPrelude+`
import gc, os, js, time
from pyodide.code import run_js
time.sleep(0.5)
attempt("gc", lambda: [o for o in gc.get_objects() if isinstance(o, dict) and any(isinstance(v, str) and v.startswith("victim-secret") for v in o.values())])
attempt("files", lambda: {d: os.listdir(d) for d in (".", "/tmp", "/home")})
attempt("js globals", lambda: str(getattr(js.globalThis, "kept", None)))
attempt("proc", lambda: [js.Deno.readTextFileSync(f"/proc/{pid}/cmdline") for pid in range(1, 100)])
await await_attempt("broadcast", run_js("""() => new Promise((res) => {
  const c = new BroadcastChannel('pyrun'); const got = [];
  c.onmessage = (e) => got.push(e.data); c.postMessage('hello?');
  setTimeout(() => { c.close(); res(JSON.stringify(got)); }, 300);
})""")())
out`, nil, 30*time.Second)
		})
		wg.Wait()
		if victim.Status != supervisor.StatusSuccess || victim.Value != `"`+secret+`"` {
			t.Errorf("victim: %s %s %s", victim.Status, victim.Value, victim.Error)
		}
		if attacker.Status != supervisor.StatusSuccess {
			t.Fatalf("attacker: %s %s", attacker.Status, attacker.Error)
		}
		if victim.Worker == attacker.Worker {
			t.Fatalf("both calls ran on %s; want them side by side", victim.Worker)
		}
		if strings.Contains(attacker.Value+attacker.Stdout+attacker.Stderr, "victim-secret-") {
			t.Errorf("the attacker saw the victim's data: %s", attacker.Value)
		}
		t.Log(attacker.Value)
	})

	t.Run("an earlier call's data", func(t *testing.T) {
		// In call isolation the next call runs on the same worker: what
		// the earlier call defined is gone, also from the collector's view.
		secret := fmt.Sprintf("earlier-secret-%d", time.Now().UnixNano())
		res := hostileRun(t, p1, "kept = secret\ndef f(): return kept\nclass K:\n    pass\nK.kept = kept\nopen('f.txt', 'w').write(secret)", map[string]any{"secret": secret}, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("%s %s", res.Status, res.Error)
		}
		res = hostileRun(t, p1, attemptPrelude+`
import gc, os
def holds(o):
    try:
        if isinstance(o, dict):
            return any(isinstance(v, str) and v.startswith(prefix) for v in o.values())
    except Exception:
        pass
    return False
attempt("globals", lambda: kept)
attempt("gc", lambda: [sorted(o)[:5] for o in gc.get_objects() if holds(o)])
attempt("files", lambda: os.listdir("."))
out`, map[string]any{"prefix": "earlier-secret-"}, 30*time.Second)
		if strings.Contains(res.Value, secret) {
			t.Errorf("the next call found the earlier call's data: %s", res.Value)
		}
		t.Log(res.Value)
	})

	t.Run("output flood and huge values keep pyrun small", func(t *testing.T) {
		var peak uint64
		var m goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&m)
		base := m.HeapInuse
		ctx, stop := context.WithCancel(t.Context())
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				var m goruntime.MemStats
				goruntime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		var wg sync.WaitGroup
		cases := map[string]string{
			"print flood":      "while True:\n    print('x' * 1000)",
			"stderr flood":     "import sys\nwhile True:\n    sys.stderr.write('y' * 100000)",
			"one huge line":    "print('z' * 50_000_000)",
			"huge value":       "'v' * 50_000_000",
			"huge list value":  "list(range(3_000_000))",
			"huge traceback":   "raise ValueError('e' * 20_000_000)",
			"deep traceback":   "def f(n): return f(n + 1)\nf(0)",
			"console flood":    "import js\nwhile True:\n    js.console.log('c' * 1000)",
			"flood of chunks":  "import sys\nfor i in range(2_000_000):\n    sys.stdout.write('a')",
			"bytes value":      "bytes(range(256)) * 100_000",
			"surrogates value": "'\\ud800' * 1_000_000",
		}
		results := map[string]supervisor.Result{}
		var mu sync.Mutex
		for name, code := range cases {
			wg.Go(func() {
				res := hostileRun(t, p, code, nil, 3*time.Second)
				mu.Lock()
				results[name] = res
				mu.Unlock()
			})
		}
		wg.Wait()
		stop()
		<-sampled
		max := p.Config().MaxOutput
		for name, res := range results {
			if res.Status == supervisor.StatusCrashed {
				t.Errorf("%s: crashed: %s", name, res.Error)
			}
			value := res.Value
			var cut string
			if json.Unmarshal([]byte(value), &cut) == nil {
				value = cut // a value cut short is a JSON string: its escapes do not count
			}
			for what, s := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr, "value": value, "error": res.Error} {
				if len(s) > max+200 {
					t.Errorf("%s: %s is %d bytes, more than max_output (%d) and its marker", name, what, len(s), max)
				}
			}
		}
		for _, name := range []string{"print flood", "one huge line"} {
			if !strings.Contains(results[name].Stdout, "cut here") {
				t.Errorf("%s: stdout lacks the cut marker", name)
			}
		}
		if !strings.Contains(results["huge value"].Value, "cut here") || !strings.Contains(results["huge traceback"].Error, "cut here") {
			t.Errorf("the huge value or traceback lacks the cut marker")
		}
		grew := int64(peak) - int64(base)
		t.Logf("pyrun's heap: %d MiB before, peak %d MiB during %d floods", base>>20, peak>>20, len(cases))
		if grew > 64<<20 {
			t.Errorf("pyrun's heap grew by %d MiB under output floods; want it bounded by the caps", grew>>20)
		}
	})

	t.Run("asyncio tasks and timers outlive their call", func(t *testing.T) {
		res := hostileRun(t, p1, `
import asyncio, js, sys
from pyodide.ffi import create_proxy
async def leak():
    while True:
        print("LEAK task")
        sys.stderr.write("LEAK task stderr\n")
        await asyncio.sleep(0.02)
async def busy():
    while True:
        await asyncio.sleep(0)
asyncio.get_event_loop().create_task(leak())
asyncio.ensure_future(busy())
js.setInterval(create_proxy(lambda: print("LEAK timer")), 20)
await asyncio.sleep(0.05)
'left'`, nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("%s %s", res.Status, res.Error)
		}
		for i := range 3 {
			res := hostileRun(t, p1, "import asyncio\nawait asyncio.sleep(0.2)\nprint('clean')\nlen(asyncio.all_tasks())", nil, 30*time.Second)
			if res.Status != supervisor.StatusSuccess || res.Stdout != "clean\n" || res.Stderr != "" {
				t.Errorf("call %d after: %s stdout %q stderr %q %s", i, res.Status, res.Stdout, res.Stderr, res.Error)
			}
			within(t, "a call after", res.Duration, 150*time.Millisecond, 5*time.Second)
		}
	})

	t.Run("callbacks left behind that raise", func(t *testing.T) {
		// A JavaScript timer a call leaves runs Python that raises, during
		// the next call on the worker: neither the call nor the worker dies.
		before := restarts(p1.Stats())
		res := hostileRun(t, p1, "import js\nfrom pyodide.ffi import create_proxy\nx = 1\ndef tick():\n    print(x)\n    1 / 0\njs.setInterval(create_proxy(tick), 50)\n'armed'", nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("%s %s", res.Status, res.Error)
		}
		for i := range 2 {
			next := hostileRun(t, p1, "import asyncio\nawait asyncio.sleep(0.3)\n'fine'", nil, 30*time.Second)
			if next.Status != supervisor.StatusSuccess || next.Worker != res.Worker || next.Stdout != "" {
				t.Errorf("call %d after: %s on %s (the timer's on %s) stdout %q: %s", i, next.Status, next.Worker, res.Worker, next.Stdout, next.Error)
			}
		}
		if n := restarts(p1.Stats()); n != before {
			t.Errorf("restarts %v", p1.Stats().Counts.Restarts)
		}
	})

	t.Run("invalid UTF-8 and lone surrogates", func(t *testing.T) {
		res := hostileRun(t, p, `
import sys, os
print("lone \ud800 and \udcff")
sys.stderr.write("\udc80\n")
sys.stdout.write("\ud83d")
sys.stdout.write("\ude00 split pair\n")
os.write(1, b"\xff\xfe raw bytes to fd 1\n")
{"\ud800key": "\udfff", "bytes": b"\xff\xfe"}`, nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("%s %s", res.Status, res.Error)
		}
		if !strings.Contains(res.Stdout, "lone \uFFFD and \uFFFD") || !strings.Contains(res.Value, `"$bytes_base64": "//4="`) {
			t.Errorf("stdout %q value %q; want replacement characters and base64 bytes", res.Stdout, res.Value)
		}
		res = hostileRun(t, p, "raise ValueError('\\ud800\\udfff')", nil, 30*time.Second)
		if res.Status != supervisor.StatusRunError || !strings.Contains(res.Error, "ValueError") {
			t.Errorf("%s %s", res.Status, res.Error)
		}
	})

	t.Run("huge code", func(t *testing.T) {
		// The front end refuses code past --max-code (1 MiB by default,
		// at most 32 MiB); the pool takes what the front end lets through.
		code := "x = 1\n" + strings.Repeat("# padding comment line\n", (8<<20)/23) + "x + 1"
		start := time.Now()
		res := hostileRun(t, p, code, nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess || res.Value != "2" {
			t.Errorf("8 MiB of code: %s %s %s", res.Status, res.Value, res.Error)
		}
		t.Logf("8 MiB of code ran in %s", time.Since(start))
		res = hostileRun(t, p, "s = '"+strings.Repeat("\\u0000", 1<<20)+"'\nlen(s)", nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess || res.Value != fmt.Sprint(1<<20) {
			t.Errorf("a literal of escapes: %s %s %s", res.Status, res.Value, res.Error)
		}
	})
}

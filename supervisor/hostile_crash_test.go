package supervisor_test

import (
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Hostile code that takes its own worker down (exits, kills, runaway
// recursion, garbage on the protocol, loops that ignore interrupts, memory
// bombs): the call is answered with what happened, the worker is
// replaced, and the next call runs.

func TestHostileCrashes(t *testing.T) {
	// Two workers: one is replaced while the other takes the next calls.
	p := realPool(t, supervisor.Config{Workers: 2, InterruptGrace: 500 * time.Millisecond})
	waitReady(t, p, 2)
	after := func(t *testing.T) {
		t.Helper()
		res := hostileRun(t, p, "print('still here')\n40 + 2", nil, 30*time.Second)
		if res.Status != supervisor.StatusSuccess || res.Value != "42" || res.Stdout != "still here\n" {
			t.Errorf("the call after: %s %q %q %s", res.Status, res.Value, res.Stdout, res.Error)
		}
	}
	for _, tc := range []struct {
		name, code string
		want       []supervisor.Status
		// replaced: the worker ends after the call, while idle, and the
		// pool must notice it without a call failing on it.
		replaced bool
	}{
		{"os._exit", "print('bye')\nimport os\nos._exit(3)", []supervisor.Status{supervisor.StatusCrashed}, false},
		{"js.Deno.exit", "print('bye')\nimport js\njs.Deno.exit(0)", []supervisor.Status{supervisor.StatusCrashed}, false},
		{"sys.exit", "import sys\nsys.exit(4)", []supervisor.Status{supervisor.StatusRunError}, false},
		{"raise SystemExit in a task", "import asyncio\nasync def f():\n    raise SystemExit(1)\nawait asyncio.gather(f())", []supervisor.Status{supervisor.StatusRunError}, false},
		{"os.kill self", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", []supervisor.Status{supervisor.StatusCrashed, supervisor.StatusRunError}, false},
		{"Deno.kill self", "import js\njs.Deno.kill(js.Deno.pid, 'SIGKILL')", []supervisor.Status{supervisor.StatusCrashed}, false},
		{"deep recursion", "def f(n): return f(n + 1)\nf(0)", []supervisor.Status{supervisor.StatusRunError}, false},
		{"deep recursion past the limit", "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)",
			[]supervisor.Status{supervisor.StatusRunError, supervisor.StatusCrashed, supervisor.StatusTimeout, supervisor.StatusMemoryError}, false},
		{"deeply nested expression", "eval('-' * 100000 + '1')", []supervisor.Status{supervisor.StatusRunError, supervisor.StatusMemoryError, supervisor.StatusCrashed}, false},
		{"deeply nested parentheses", "eval('(' * 5000 + ')' * 5000)", []supervisor.Status{supervisor.StatusRunError}, false},
		{"deeply nested data", "x = []\nfor _ in range(300_000):\n    x = [x]\nrepr(x)", []supervisor.Status{supervisor.StatusRunError, supervisor.StatusCrashed, supervisor.StatusMemoryError}, false},
		{"garbage on the protocol", "import js\njs.Deno.stdout.writeSync(js.Uint8Array.new([255, 254, 10]))\nimport time\ntime.sleep(1)",
			[]supervisor.Status{supervisor.StatusCrashed}, false},
		{"another call's id on the protocol", "import js\njs.Deno.stdout.writeSync(js.TextEncoder.new().encode('{\"type\":\"output\",\"id\":\"other\",\"stream\":\"stdout\",\"text\":\"x\"}\\n'))\nimport time\ntime.sleep(1)",
			[]supervisor.Status{supervisor.StatusCrashed}, false},
		{"an endless line on the protocol", "import js\nb = js.Uint8Array.new(1 << 20).fill(65)\nwhile True:\n    js.Deno.stdout.writeSync(b)",
			[]supervisor.Status{supervisor.StatusCrashed}, false},
		{"a time bomb for the worker", "import js\nfrom pyodide.ffi import create_proxy\njs.setTimeout(create_proxy(lambda: js.Deno.exit(9)), 300)\n'armed'",
			[]supervisor.Status{supervisor.StatusSuccess}, true},
		{"C loop that ignores interrupts", "sum(range(10**12))", []supervisor.Status{supervisor.StatusTimeout}, false},
		{"code that swallows interrupts", "while True:\n    try:\n        while True: pass\n    except BaseException:\n        pass", []supervisor.Status{supervisor.StatusTimeout}, false},
		{"worker thread spinning", "from pyodide.code import run_js\nrun_js(\"new Worker('data:text/javascript,for(;;){}', {type: 'module'})\")\n'spawned'",
			[]supervisor.Status{supervisor.StatusSuccess}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := restarts(p.Stats())
			res := hostileRun(t, p, tc.code, nil, 2*time.Second)
			took := res.Duration // the run itself, without waiting for a worker
			ok := false
			for _, s := range tc.want {
				ok = ok || res.Status == s
			}
			if !ok {
				t.Errorf("status %s, want one of %v; error:\n%s", res.Status, tc.want, clipString(res.Error, 2000))
			}
			within(t, "the call", took, 0, 2*time.Second+5*time.Second)
			if strings.Contains(tc.code, "print('bye')") && res.Stdout != "bye\n" {
				t.Errorf("stdout %q, want the output before the end", res.Stdout)
			}
			if tc.replaced {
				supervisor.WaitUntil(t, func() bool { return restarts(p.Stats()) > before })
				t.Logf("restarts: %v", p.Stats().Counts.Restarts)
			}
			after(t)
		})
	}
}

func TestHostileMemory(t *testing.T) {
	limit := int64(256 << 20)
	p := realPool(t, supervisor.Config{Workers: 2, MemoryLimit: limit})
	var m goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&m)
	base := m.HeapInuse
	for _, tc := range []struct{ name, code string }{
		{"one big bytearray", "print('allocating')\nx = bytearray(400 * 2**20)"},
		{"growing list", "print('allocating')\nx = []\nwhile True:\n    x.append('y' * 2**20)"},
		{"huge string", "print('allocating')\nx = 'z' * 2**29"},
		{"many small objects", "print('allocating')\nx = [object() for _ in range(10**9)]"},
		{"huge integer", "print('allocating')\nx = 2 ** (2 ** 34)"},
		{"JavaScript buffers", "print('allocating')\nimport js\nx = [js.Uint8Array.new(32 * 2**20).fill(1) for _ in range(64)]\nimport time\ntime.sleep(5)"},
		{"JavaScript heap", "print('allocating')\nfrom pyodide.code import run_js\nrun_js('globalThis.a = []; for (;;) globalThis.a.push(new Array(100000).fill(Math.random()))')"},
		{"JavaScript threads", "print('allocating')\nfrom pyodide.code import run_js\nrun_js(\"for (let i = 0; i < 2000; i++) new Worker('data:text/javascript,globalThis.x = new Uint8Array(8 << 20).fill(1); setInterval(() => {}, 1000)', {type: 'module'})\")\nimport time\ntime.sleep(5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res := hostileRun(t, p, tc.code, nil, 10*time.Second)
			t.Logf("%s in %s: %s", res.Status, time.Since(start).Round(time.Millisecond), clipString(res.Error, 300))
			if res.Status != supervisor.StatusMemoryError || res.Status.ExitCode() != 137 {
				t.Errorf("status %s, want memory-error; error:\n%s", res.Status, clipString(res.Error, 2000))
			}
			if res.Stdout != "allocating\n" {
				t.Errorf("stdout %q, want the output before the bomb", res.Stdout)
			}
			// The worker is replaced; calls go on.
			next := hostileRun(t, p, "len(bytearray(50 * 2**20))", nil, 30*time.Second)
			if next.Status != supervisor.StatusSuccess || next.Worker == res.Worker {
				t.Errorf("the next call: %s on %s after %s: %s", next.Status, next.Worker, res.Worker, next.Error)
			}
		})
	}
	goruntime.ReadMemStats(&m)
	t.Logf("pyrun's heap: %d MiB before, %d MiB after the bombs", base>>20, m.HeapInuse>>20)
	if grew := int64(m.HeapInuse) - int64(base); grew > 32<<20 {
		t.Errorf("pyrun's heap grew by %d MiB", grew>>20)
	}
}

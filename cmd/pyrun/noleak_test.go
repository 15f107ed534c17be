package main

import (
	"fmt"
	"strings"
	"testing"
)

// ---- isolation, on a one-worker server -------------------------------------

// TestNoLeak checks that nothing a call leaves behind reaches the next call.
// The server has one worker, so every call lands where the previous ran.
func TestNoLeak(t *testing.T) {
	s := newServer(t, "--workers", "1")

	t.Run("globals and imports", func(t *testing.T) {
		wantStatus(t, s.mustCall(t, map[string]any{
			"python_code":      "leaked_var = 42\nimport json\nimport builtins\nbuiltins.leaked_builtin = 1\ndef leaked_fn(): pass",
			"global_variables": map[string]any{"leaked_global": 1},
		}), "success")
		for _, name := range []string{"leaked_var", "json", "leaked_builtin", "leaked_fn", "leaked_global"} {
			r := s.run(t, name)
			wantStatus(t, r, "run-error")
			if want := fmt.Sprintf("NameError: name '%s' is not defined", name); !strings.Contains(*r.sc.Error, want) {
				t.Errorf("%s in the next call: %s; want %s", name, *r.sc.Error, want)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		before := s.run(t, "import os\nos.getcwd()")
		wantStatus(t, before, "success")
		wantStatus(t, s.run(t, `import os
open("leak.txt", "w").write("x")
os.makedirs("leakdir/sub")
open("leakdir/sub/f.txt", "w").write("x")
open("/tmp/leak.txt", "w").write("x")
os.makedirs("/tmp/leakdir")
os.chdir("/tmp")
`), "success")
		r := s.run(t, `import os
[os.getcwd(), os.listdir("."), os.path.exists("/tmp/leak.txt"), os.path.exists("/tmp/leakdir")]`)
		wantValue(t, r, fmt.Sprintf(`[%s, [], false, false]`, before.sc.ReturnValue))
	})

	t.Run("modules", func(t *testing.T) {
		wantValue(t, s.run(t, `open("mymod.py", "w").write("VALUE = 1\n")
import mymod
mymod.VALUE`), "1")
		r := s.run(t, "import mymod")
		wantStatus(t, r, "run-error")
		if !strings.Contains(*r.sc.Error, "ModuleNotFoundError") {
			t.Errorf("import mymod in the next call: %s; want ModuleNotFoundError", *r.sc.Error)
		}
		// A module of the same name written again is the new one.
		wantValue(t, s.run(t, `open("mymod.py", "w").write("VALUE = 2\n")
import mymod
mymod.VALUE`), "2")
	})

	t.Run("asyncio task", func(t *testing.T) {
		r := s.run(t, `import asyncio
async def leak():
    while True:
        print("LEAK")
        await asyncio.sleep(0.05)
asyncio.get_event_loop().create_task(leak())
await asyncio.sleep(0.12)
`)
		wantStatus(t, r, "success")
		if !strings.Contains(r.sc.Stdout, "LEAK") {
			t.Fatalf("the task did not run during its own call: stdout %q", r.sc.Stdout)
		}
		for range 3 {
			r := s.run(t, "import asyncio\nawait asyncio.sleep(0.3)\nprint('clean')")
			wantStatus(t, r, "success")
			if r.sc.Stdout != "clean\n" || r.sc.Stderr != "" {
				t.Errorf("a later call's output: stdout %q, stderr %q; want only %q", r.sc.Stdout, r.sc.Stderr, "clean\n")
			}
		}
	})

	t.Run("js timer", func(t *testing.T) {
		r := s.run(t, `import js, asyncio
from pyodide.ffi import create_proxy
js.setInterval(create_proxy(lambda: print("LEAK")), 50)
await asyncio.sleep(0.12)
`)
		wantStatus(t, r, "success")
		for range 3 {
			r := s.run(t, "import asyncio\nawait asyncio.sleep(0.3)\nprint('clean')")
			wantStatus(t, r, "success")
			if r.sc.Stdout != "clean\n" || r.sc.Stderr != "" {
				t.Errorf("a later call's output: stdout %q, stderr %q; want only %q", r.sc.Stdout, r.sc.Stderr, "clean\n")
			}
		}
	})
}

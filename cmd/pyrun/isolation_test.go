package main

import (
	"strings"
	"testing"
)

// stdinThief leaves a reader on the worker's stdin behind the call: on a
// reused worker it would take the next call's request (its code and
// arguments) before pyrun's own reader does.
const stdinThief = `from pyodide.code import run_js
run_js('''globalThis.stolen = [];
(async () => {
  const b = new Uint8Array(1 << 20);
  for (;;) {
    const n = await Deno.stdin.read(b);
    if (n === null) break;
    globalThis.stolen.push(new TextDecoder().decode(b.subarray(0, n)));
  }
})()''')
import sys
sys.pyrun_mark = "left behind"
'armed'`

// TestIsolationProcess: with --isolation process every call runs on a
// worker that never ran code, so nothing one call leaves in the interpreter
// or the JavaScript runtime reaches another, and no call can read another's
// request.
func TestIsolationProcess(t *testing.T) {
	s := newServer(t, "--workers", "2", "--isolation", "process")
	wantValue(t, s.run(t, stdinThief), `"armed"`)
	for i := range 3 {
		r := s.mustCall(t, map[string]any{
			"python_code":      "import sys, js\n[getattr(sys, 'pyrun_mark', None), hasattr(js, 'stolen'), secret]",
			"global_variables": map[string]any{"secret": "next-call-secret"},
		})
		wantValue(t, r, `[null, false, "next-call-secret"]`)
		if t.Failed() {
			t.Fatalf("call %d", i)
		}
	}
}

// TestIsolationCallLimits pins what docs/security.md (Isolation between calls) says persists
// on a reused worker with --isolation call: changes to imported modules and
// to the JavaScript runtime, including a reader left on stdin that takes the
// next call's request. The next call is then lost (it times out) and its
// worker replaced; the thief's call sees what it took.
func TestIsolationCallLimits(t *testing.T) {
	s := newServer(t, "--workers", "1", "--timeout", "3s")
	wantValue(t, s.run(t, "import json\njson.pyrun_patched = True\nimport js\njs.globalThis.pyrunLeft = 1\n1"), "1")
	wantValue(t, s.run(t, "import json, js\n[getattr(json, 'pyrun_patched', False), js.globalThis.pyrunLeft]"), "[true, 1]")

	wantValue(t, s.run(t, stdinThief), `"armed"`)
	r := s.mustCall(t, map[string]any{"python_code": "secret", "global_variables": map[string]any{"secret": "victim-secret"}})
	wantStatus(t, r, "timeout")
	// The worker was replaced after the timeout: the thief's loot went with it.
	r = s.run(t, "import js\nhasattr(js, 'stolen')")
	wantValue(t, r, "false")
	if strings.Contains(r.text, "victim-secret") {
		t.Errorf("the secret reached another call: %s", r.text)
	}
}

package main

// End-to-end tests of sessions that run real native code (docs/sessions.md,
// Native code): side modules built with emcc by internal/nativefix, loaded
// through ctypes, imported as a CPython extension module from the session's
// files, and installed as a binary wheel from a --wheelhouse.

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/nativefix"
)

// nativeFiles is the `files` argument that puts the fixtures' side modules
// in a session's working directory.
func nativeFiles(t *testing.T, fx nativefix.Fixtures) map[string]any {
	t.Helper()
	files := map[string]any{}
	for _, p := range []string{fx.Counter, fx.Extension} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = map[string]any{"base64": base64.StdEncoding.EncodeToString(b)}
	}
	return files
}

// nativeSetup loads both fixtures from the working directory and uses them.
const nativeSetup = `import ctypes, sys
sys.path.insert(0, '.')
lib = ctypes.CDLL('./libcounter.so')
lib.counter_saved.restype = ctypes.c_char_p
import pyrunnative
[lib.counter_next(), lib.counter_next(), lib.counter_apply(0, 40, 2), lib.counter_apply(1, 6, 7),
 lib.counter_save(b'kept in C'), pyrunnative.bump(), pyrunnative.bump()]`

// nativeNext uses the state the setup left in C: the counters go on, the
// function pointer faster() sets is called, a Python object is held by C.
const nativeNext = `held = {'rows': [1, 2, 3]}
pyrunnative.keep(held)
pyrunnative.faster()
del held
[lib.counter_next(), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()['rows']]`

// A session imports a C library through ctypes and a CPython extension
// module from its own files; their C state is kept across the session's
// calls (both on the session's worker).
func TestNativeCodeFromSessionFiles(t *testing.T) {
	fx := nativefix.Build(t)
	s := newServer(t, "--workers", "1", "--network", "none")
	r := s.inSession(t, "new", nativeSetup, "files", nativeFiles(t, fx))
	wantValue(t, r, "[1, 2, 42, 42, 9, 1, 2]")
	r = s.inSession(t, r.sc.SessionID, nativeNext)
	wantValue(t, r, `[3, "kept in C", 4, [1, 2, 3]]`)
	// A call outside the session has its own interpreter state: the
	// module's statics are the session's worker's.
	r = s.run(t, "import sys\n'pyrunnative' in sys.modules")
	wantValue(t, r, "false")
}

// The extension as a binary wheel (tag pyemscripten_2026_0_wasm32) from a
// --wheelhouse is installed by its import, offline, through Pyodide's
// loader for wheels with native code, and its state lasts in a session.
func TestNativeWheelFromWheelhouse(t *testing.T) {
	fx := nativefix.Build(t)
	if !strings.HasSuffix(fx.Wheel, "-cp314-cp314-pyemscripten_2026_0_wasm32.whl") {
		t.Fatalf("wheel %s", fx.Wheel)
	}
	s := newServer(t, "--workers", "1", "--network", "none", "--wheelhouse", fx.Wheelhouse)
	r := s.inSession(t, "new", "import pyrunnative\n[pyrunnative.bump(), pyrunnative.bump(), pyrunnative.__file__]")
	wantStatus(t, r, "success")
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); !strings.HasPrefix(got, "[1,2,") ||
		!strings.Contains(got, "site-packages/pyrunnative.cpython-314-wasm32-emscripten.so") {
		t.Fatalf("the wheel's module: %s\n%s", got, r.text)
	}
	r = s.inSession(t, r.sc.SessionID, "pyrunnative.bump()")
	wantValue(t, r, "3")
}

// A session that loaded real side modules is durable: its worker killed,
// the next call goes on from the checkpoint with the C libraries' state
// (counters, a malloc'ed string, a function pointer set at run time, a
// Python object C holds), and calls into them work.
func TestNativeSessionSurvivesItsWorker(t *testing.T) {
	fx := nativefix.Build(t)
	s := newServer(t, "--workers", "1", "--network", "none", "--session-worker", "own",
		"--session-store", "dir:"+t.TempDir(), "--checkpoint-delay", "100ms")
	r := s.inSession(t, "new", nativeSetup+"\n"+nativeNext, "files", nativeFiles(t, fx))
	wantValue(t, r, `[3, "kept in C", 4, [1, 2, 3]]`)
	id := r.sc.SessionID
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the checkpoint after call 1", func(c map[string]int) bool {
		return c["session checkpoint"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	// A fork carries the native state, and its calls leave the session's alone.
	f := s.mustCall(t, map[string]any{"session_id": "fork:" + id,
		"python_code": "[lib.counter_next(), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()['rows']]"})
	wantValue(t, f, `[4, "kept in C", 6, [1, 2, 3]]`)
	r = s.inSession(t, id, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 {
		t.Fatalf("the lost call of a native session: %+v\n%s", r.sc.Checkpoint, r.text)
	}
	r = s.inSession(t, id, "[lib.counter_next(), lib.counter_apply(1, 6, 7), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()['rows'], lib.counter_save(b'again')]")
	wantValue(t, r, `[4, 42, "kept in C", 6, [1, 2, 3], 5]`)
}

// A ctypes callback (a JavaScript function made callable from C) cannot
// be restored: the session's checkpoint is refused with the reason in the
// log, and when its worker dies the result says the state is lost and why.
func TestNativeCallbackSessionIsNotDurable(t *testing.T) {
	fx := nativefix.Build(t)
	s := newServer(t, "--workers", "1", "--network", "none", "--session-worker", "own",
		"--session-store", "dir:"+t.TempDir(), "--checkpoint-delay", "100ms")
	r := s.inSession(t, "new", nativeSetup+"\ncb = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)\ncb()", "files", nativeFiles(t, fx))
	wantValue(t, r, "1")
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the refused checkpoint", func(c map[string]int) bool {
		return c["session is not durable"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	r = s.inSession(t, r.sc.SessionID, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint != nil || r.sc.Error == nil || !strings.Contains(*r.sc.Error, "was lost") || !strings.Contains(*r.sc.Error, "native code") {
		t.Fatalf("the lost call of a native session: %+v\n%s", r.sc.Checkpoint, r.text)
	}
}

// The binary wheel's module, loaded by Pyodide's package loader (its
// asynchronous path), is restored too: its worker killed, the next call
// goes on with its counter.
func TestNativeWheelSessionSurvivesItsWorker(t *testing.T) {
	fx := nativefix.Build(t)
	s := newServer(t, "--workers", "1", "--network", "none", "--wheelhouse", fx.Wheelhouse, "--session-worker", "own",
		"--session-store", "dir:"+t.TempDir(), "--checkpoint-delay", "100ms")
	r := s.inSession(t, "new", "import pyrunnative\npyrunnative.bump(); pyrunnative.faster(); pyrunnative.bump()")
	wantValue(t, r, "3")
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the checkpoint after call 1", func(c map[string]int) bool {
		return c["session checkpoint"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	r = s.inSession(t, r.sc.SessionID, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 {
		t.Fatalf("the lost call of a native session: %+v\n%s", r.sc.Checkpoint, r.text)
	}
	wantValue(t, s.inSession(t, r.sc.SessionID, "pyrunnative.bump()"), "5")
}

// A native session outlives pyrun: stopped (its shutdown checkpoint) and
// started again on the same store, it goes on with its C state.
func TestNativeSessionSurvivesARestart(t *testing.T) {
	needBinary(t)
	fx := nativefix.Build(t)
	args := []string{"--workers", "1", "--network", "none", "--session-worker", "own", "--session-store", "dir:" + t.TempDir(),
		"--instance-id", "box-9", "--checkpoint-delay", "1h"} // only the shutdown's checkpoint
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	first, err := startServerFor(ctx, time.Minute, "", nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	r := first.inSession(t, "new", nativeSetup+"\n"+nativeNext, "files", nativeFiles(t, fx))
	wantValue(t, r, `[3, "kept in C", 4, [1, 2, 3]]`)
	if err := first.session.Close(); err != nil {
		t.Fatalf("the first pyrun did not exit cleanly: %v\n%s", err, first.log.tail())
	}
	second := newServer(t, args...)
	r = second.inSession(t, r.sc.SessionID, "[lib.counter_next(), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()['rows']]")
	wantValue(t, r, `[4, "kept in C", 6, [1, 2, 3]]`)
}

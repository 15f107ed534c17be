package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestClientsNeverShareWorkers: the attacks docs/security.md (Isolation
// between calls) admits within one client reach none of another client's
// calls, with `pyrun serve`'s default settings (--isolation call) and two
// clients with tokens. Python: a reader left on the worker's stdin,
// results forged through pyrun_helper, module patches (a json.dumps that
// keeps what later calls give it), an event loop callback, a JavaScript
// timer and global. R: trace()
// and a base function replaced, and R's way into the worker's JavaScript
// (webR's ffi_eval_js on the main thread): a thief of later requests and
// a forger of later results. JavaScript: globals, a patched built-in and
// prototype, a timer. Each has a control in alice's own client: where it
// reaches her later calls (as documented), the assertions on bob's calls
// fail once the pool lets clients share workers (checked by making the
// pool ignore Job.Client). R's reset undoes trace() and the replaced
// function, and JavaScript's fresh Worker per call undoes everything, for
// alice too: their controls show the plant at work in the planting call
// and gone from her next one. The call log shows no worker of any
// language ran calls of both clients.
func TestClientsNeverShareWorkers(t *testing.T) {
	tokens, aliceToken, bobToken := twoClients(t)
	// Two workers per language: a client's share is then one (half the
	// pool), and bob's first call takes a fresh worker beside alice's
	// instead of retiring hers (a client's first call is never kept waiting
	// for another's idle workers), so her controls find her worker again.
	s := startServe(t, "--auth-token-file", tokens, "--languages", "python,r,javascript",
		"--workers", "2", "--r-workers", "2", "--js-workers", "2")
	// Every language up first, as a deployment waits for /healthz: a
	// webR start takes many seconds of CPU.
	s.waitHealth(t, "every language's first worker", func(h health) bool { return h.Status == "ok" })
	mark := s.log.mark()
	alice, _ := s.mustDial(t, "mcp", aliceToken)
	bob, _ := s.mustDial(t, "mcp", bobToken)

	t.Run("python", func(t *testing.T) { clientAttacksPython(t, alice, bob) })
	t.Run("r", func(t *testing.T) { clientAttacksR(t, s, alice, bob) })
	t.Run("javascript", func(t *testing.T) { clientAttacksJavaScript(t, s, alice, bob) })

	// No worker of any language ran calls of both clients.
	owner := map[string]string{} // language/worker: client
	for _, rec := range s.log.since(mark) {
		if rec.msg() != "call" || rec.str("worker") == "" {
			continue
		}
		w := rec.str("@module") + "/" + rec.str("worker")
		if c, ok := owner[w]; ok && c != rec.str("client") {
			t.Errorf("worker %s ran calls of %s and of %s", w, c, rec.str("client"))
		}
		owner[w] = rec.str("client")
	}
	if len(owner) < 6 {
		t.Errorf("calls ran on %d workers (%v), want at least 6", len(owner), owner)
	}
	// /healthz counts the clients owning workers, and names none behind
	// access control (it is open).
	if h := s.health(t); h.Clients < 2 || h.WorkersByClient != nil {
		t.Errorf("/healthz clients %d, workers_by_client %v: want alice and bob counted, not named", h.Clients, h.WorkersByClient)
	}
}

// pythonPlant patches modules that stay imported: math.pi, sys, a json.dumps
// that keeps what it is given (json.pyrun_loot) and answers "patched"; an
// event loop callback and a JavaScript timer (import js) that change math
// once the call is over; a JavaScript global; and a builtin (pyrun
// restores builtins after every call, alice's too).
const pythonPlant = `import asyncio, builtins, js, json, math, sys
from pyodide.ffi import create_once_callable
math.pi = 3
json.pyrun_loot = []
def dumps(*args, **kwargs):
    json.pyrun_loot.append(repr(args))
    return '"patched"'
json.dumps = dumps
sys.getdefaultencoding = lambda: 'patched'
builtins.divmod = lambda a, b: 'patched'
asyncio.get_event_loop().call_soon(setattr, math, 'tau', 1)
js.setTimeout(create_once_callable(lambda: setattr(math, 'e', 2)), 0)
js.globalThis.pyrunLeak = 'alice'
'armed'`

// pythonVictim is what the patches would change, and a secret in its
// arguments a thief would take.
const pythonVictim = `import js, json, math, sys
[math.pi, math.tau, math.e, json.dumps(secret), sys.getdefaultencoding(), divmod(7, 2),
 getattr(js, 'pyrunLeak', None), secret]`

func pythonVictimWant(secret string) string {
	return fmt.Sprintf(`[3.141592653589793, 6.283185307179586, 2.718281828459045, "\"%s\"", "utf-8", [3, 1], null, "%s"]`,
		secret, secret)
}

func clientAttacksPython(t *testing.T, alice, bob *server) {
	victim := func(t *testing.T, c *server, secret string) result {
		t.Helper()
		return c.mustCall(t, map[string]any{"python_code": pythonVictim,
			"global_variables": map[string]any{"secret": secret}, "timeout_seconds": 10})
	}
	bobsCalls := func(t *testing.T, what string) {
		t.Helper()
		for i := range 3 {
			secret := fmt.Sprintf("bob-%s-secret-%d", what, i)
			r := victim(t, bob, secret)
			if r.sc.Status != "success" || !jsonEqual(string(r.sc.ReturnValue), pythonVictimWant(secret)) {
				t.Errorf("bob's call %d met alice's %s: %s, value %s, want %s", i, what, r.sc.Status, r.sc.ReturnValue, pythonVictimWant(secret))
			}
		}
	}

	t.Run("module patches", func(t *testing.T) {
		wantValue(t, alice.run(t, pythonPlant), `"armed"`)
		bobsCalls(t, "patches")
		// Control: alice's own next call meets her patches (the builtin
		// excepted), and her json.dumps keeps her secret, none of bob's.
		r := victim(t, alice, "alice-secret")
		wantValue(t, r, `[3, 1, 2, "\"patched\"", "patched", [3, 1], "alice", "alice-secret"]`)
		r = alice.run(t, "import json\n' '.join(json.pyrun_loot)")
		if !strings.Contains(string(r.sc.ReturnValue), "alice-secret") {
			t.Errorf("control: alice's json.dumps did not keep her own secret: %s", r.text)
		}
		if strings.Contains(r.text, "bob-") {
			t.Errorf("alice's json.dumps kept bob's secrets: %s", r.text)
		}
	})

	t.Run("stdin reader", func(t *testing.T) {
		wantValue(t, alice.run(t, stdinThief), `"armed"`)
		bobsCalls(t, "stdin")
		// Control: the reader takes alice's own next call, which times out
		// (and its worker is replaced).
		r := alice.mustCall(t, map[string]any{"python_code": "secret", "global_variables": map[string]any{"secret": "alice-secret"},
			"timeout_seconds": 3})
		wantStatus(t, r, "timeout")
	})

	t.Run("forged results", func(t *testing.T) {
		const forge = `import pyrun_helper
_finish = pyrun_helper._finish
def forged(call, result, started):
    result.pop("error", None)
    result.update(status="success", value='"forged"')
    return _finish(call, result, started)
pyrun_helper._finish = forged
'armed'`
		alice.run(t, forge) // its own result is forged already
		bobsCalls(t, "forger")
		// Control: alice's own next call gets the forged result.
		wantValue(t, alice.run(t, "6 * 7"), `"forged"`)
	})
}

// rMainThread runs JavaScript on the R worker's main thread, which owns
// the protocol's pipes, through webR's ffi (docs/protocol.md, Engines: R):
// pyrun's reset of R does not reach it.
func rMainThread(js string) string {
	return fmt.Sprintf(".Call(webr:::ffi_eval_js, %q, TRUE)", js)
}

// rThief keeps the code of every later request the R worker reads.
const rThief = `(() => {
  globalThis.pyrunLoot = [];
  const parse = JSON.parse;
  JSON.parse = function (...args) {
    const v = parse.apply(this, args);
    if (v && v.type === "run") globalThis.pyrunLoot.push(String(v.code));
    return v;
  };
  return "armed";
})()`

// rForger makes every later successful result of the R worker "forged".
const rForger = `(() => {
  const stringify = JSON.stringify;
  JSON.stringify = function (v, ...args) {
    if (v && v.type === "result" && v.status === "success") v = { ...v, value: '"forged"' };
    return stringify.call(this, v, ...args);
  };
  return "armed";
})()`

func clientAttacksR(t *testing.T, s *httpServer, alice, bob *server) {
	r := func(t *testing.T, c *server, code string) result {
		t.Helper()
		return c.runIn(t, "run_r_code", "r_code", code)
	}
	// bob's victim: what trace(), a replaced base function or a forger would
	// change, and a secret in its code a thief would take.
	victimCode := func(secret string) string {
		return fmt.Sprintf("secret <- %q\nc(paste('a', 'b'), toupper('x'), secret)", secret)
	}
	bobsCalls := func(t *testing.T, what string) {
		t.Helper()
		for i := range 2 {
			secret := fmt.Sprintf("bob-%s-secret-%d", what, i)
			got := r(t, bob, victimCode(secret))
			if want := fmt.Sprintf(`["a b", "X", "%s"]`, secret); got.sc.Status != "success" ||
				!jsonEqual(string(got.sc.ReturnValue), want) || strings.Contains(got.sc.Stdout, "TRACED") {
				t.Errorf("bob's R call %d met alice's %s: %s, value %s, stdout %q, want %s", i, what, got.sc.Status, got.sc.ReturnValue, got.sc.Stdout, want)
			}
		}
	}

	t.Run("trace and a replaced base function", func(t *testing.T) {
		// Control inside the call: the plants work while it runs.
		got := r(t, alice, `invisible(trace("paste", quote(cat("TRACED\n")), print = FALSE, where = baseenv()))
unlockBinding("toupper", baseenv())
assign("toupper", function(x) "PATCHED", envir = baseenv())
invisible(paste("x"))
toupper("x")`)
		wantValue(t, got, `"PATCHED"`)
		if !strings.Contains(got.sc.Stdout, "TRACED") {
			t.Errorf("control: alice's trace() did not run in her own call: %q", got.sc.Stdout)
		}
		freshWorker(t, s, "r") // for bob's first call; his later ones reuse it
		bobsCalls(t, "trace")
		// pyrun's reset undoes both after every call, alice's own too
		// (docs/security.md): they reach none of her later calls either.
		got = r(t, alice, victimCode("alice-secret"))
		wantValue(t, got, `["a b", "X", "alice-secret"]`)
		if strings.Contains(got.sc.Stdout, "TRACED") {
			t.Errorf("alice's trace() outlived her call: %q", got.sc.Stdout)
		}
	})

	t.Run("request thief on the main thread", func(t *testing.T) {
		wantValue(t, r(t, alice, rMainThread(rThief)), `"armed"`)
		bobsCalls(t, "thief")
		r(t, alice, victimCode("alice-secret"))
		// Control: the thief kept alice's own later call, none of bob's.
		got := r(t, alice, rMainThread("JSON.stringify(globalThis.pyrunLoot ?? null)"))
		wantStatus(t, got, "success")
		if !strings.Contains(string(got.sc.ReturnValue), "alice-secret") {
			t.Errorf("control: alice's thief did not take her own later call: %s", got.text)
		}
		if strings.Contains(got.text, "bob-") {
			t.Errorf("alice's thief took bob's calls: %s", got.text)
		}
	})

	t.Run("forged results on the main thread", func(t *testing.T) {
		r(t, alice, rMainThread(rForger)) // its own result is forged already
		bobsCalls(t, "forger")
		// Control: alice's own next call gets the forged result.
		wantValue(t, r(t, alice, "6 * 7"), `"forged"`)
	})
}

// jsPlant leaves what a JavaScript call can leave: a global, a patched
// built-in (JSON.stringify), a patched prototype, and a timer that prints
// and changes a global. Its value shows each at work inside the call.
const jsPlant = `globalThis.leak = "alice-js";
const stringify = JSON.stringify;
JSON.stringify = () => '"patched"';
(Array.prototype as any).leak = "alice-js";
let ticks = 0;
setInterval(() => { ticks++; (globalThis as any).ticks = ticks; console.log("TIMER"); }, 10);
await new Promise((r) => setTimeout(r, 100));
[typeof (globalThis as any).leak, JSON.stringify(1), ([] as any).leak, (globalThis as any).ticks > 0]`

// jsVictim looks for each of them, after giving a timer time to fire.
const jsVictim = `await new Promise((r) => setTimeout(r, 100));
[typeof (globalThis as any).leak, JSON.stringify(1), typeof ([] as any).leak, typeof (globalThis as any).ticks]`

func clientAttacksJavaScript(t *testing.T, s *httpServer, alice, bob *server) {
	js := func(t *testing.T, c *server, code string) result {
		t.Helper()
		return c.runIn(t, "run_javascript_code", "javascript_code", code)
	}
	clean := func(t *testing.T, who string, got result) {
		t.Helper()
		if got.sc.Status != "success" || !jsonEqual(string(got.sc.ReturnValue), `["undefined", "1", "undefined", "undefined"]`) ||
			strings.Contains(got.sc.Stdout, "TIMER") {
			t.Errorf("%s's call met alice's globals or timer: %s, value %s, stdout %q", who, got.sc.Status, got.sc.ReturnValue, got.sc.Stdout)
		}
	}
	// Control inside the call: each plant works while it runs.
	got := js(t, alice, jsPlant)
	wantValue(t, got, `["string", "\"patched\"", "alice-js", true]`)
	if !strings.Contains(got.sc.Stdout, "TIMER") {
		t.Errorf("control: alice's timer did not print in her own call: %q", got.sc.Stdout)
	}
	freshWorker(t, s, "javascript")
	for range 2 {
		clean(t, "bob", js(t, bob, jsVictim))
	}
	// A stateless call's Worker is terminated at its end (docs/protocol.md,
	// Engines: JavaScript): nothing reaches alice's own next call either.
	clean(t, "alice", js(t, alice, jsVictim))
}

// freshWorker waits until language's pool has a never-used worker ready,
// so that bob's first call does not wait in line for one to start (a webR
// start takes many seconds of CPU on a busy machine).
func freshWorker(t *testing.T, s *httpServer, language string) {
	t.Helper()
	s.waitHealth(t, "a fresh "+language+" worker", func(h health) bool { return h.Languages[language].WorkersFresh > 0 })
}

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientsNeverShareWorkers: the attacks docs/security.md (Isolation
// between calls) admits within one client (a reader left on the worker's
// stdin, results forged through pyrun_helper, module patches, R's trace(),
// JavaScript globals and timers) reach none of another client's calls, with
// `pyrun serve`'s default settings and two clients with tokens. Controls
// show the Python attacks still work within their own client, so the test
// would fail if the clients' calls shared workers; and the call log shows
// no worker of any language ran calls of both.
func TestClientsNeverShareWorkers(t *testing.T) {
	const (
		aliceToken = "alice-Qm4Zt8Lw1Xc7Vb2N"
		bobToken   = "bob-Hs9Pk3Rd6Fy0Jt5Gw1"
	)
	tokens := filepath.Join(t.TempDir(), "tokens")
	saveTokens(t, tokens, "alice:"+aliceToken+"\nbob:"+bobToken+"\n")
	s := startServe(t, "--auth-token-file", tokens, "--languages", "python,r,javascript")
	// Every language up first, as a deployment waits for /healthz: a
	// webR start takes many seconds of CPU.
	s.waitHealth(t, "every language's first worker", func(h health) bool { return h.Status == "ok" })
	mark := s.log.mark()
	alice, _ := s.mustDial(t, "mcp", aliceToken)
	bob, _ := s.mustDial(t, "mcp", bobToken)

	// bob's victim call: what a patched math or json, or a forged result,
	// would change, and a secret in its arguments a thief would take.
	const victim = "import math, json\n[math.pi, json.dumps(secret), secret]"
	victimCall := func(t *testing.T, i int) {
		t.Helper()
		secret := fmt.Sprintf("bob-secret-%d", i)
		r := bob.mustCall(t, map[string]any{"python_code": victim, "global_variables": map[string]any{"secret": secret},
			"timeout_seconds": 10})
		wantValue(t, r, fmt.Sprintf(`[3.141592653589793, "\"%s\"", "%s"]`, secret, secret))
	}

	t.Run("module patches", func(t *testing.T) {
		wantValue(t, alice.run(t, "import math, json\nmath.pi = 3\njson.dumps = lambda *a, **k: '\"patched\"'\n'armed'"), `"armed"`)
		// Control: alice's own next call meets her patches.
		wantValue(t, alice.run(t, "import math, json\n[math.pi, json.dumps(1)]"), `[3, "\"patched\""]`)
		for i := range 3 {
			victimCall(t, i)
		}
	})

	t.Run("stdin reader", func(t *testing.T) {
		wantValue(t, alice.run(t, stdinThief), `"armed"`)
		for i := range 3 {
			victimCall(t, i)
		}
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
		// Control: alice's own next call gets the forged result.
		wantValue(t, alice.run(t, "6 * 7"), `"forged"`)
		for i := range 3 {
			victimCall(t, i)
		}
	})

	t.Run("R trace", func(t *testing.T) {
		r := alice.runIn(t, "run_r_code", "r_code",
			"trace('sum', quote(cat('TRACED\\n')), print = FALSE)\nassign('leak', 'alice-r', envir = .GlobalEnv)\n'armed'")
		wantValue(t, r, `"armed"`)
		freshWorker(t, s, "r")
		r = bob.runIn(t, "run_r_code", "r_code", "c(sum(1:3), exists('leak'))")
		wantValue(t, r, "[6,0]")
		if strings.Contains(r.sc.Stdout, "TRACED") {
			t.Errorf("alice's trace() ran in bob's call: %q", r.sc.Stdout)
		}
	})

	t.Run("JavaScript globals and timers", func(t *testing.T) {
		r := alice.runIn(t, "run_javascript_code", "javascript_code",
			"globalThis.leak = 'alice-js';\nsetInterval(() => console.log('TIMER'), 20);\n'armed'")
		wantValue(t, r, `"armed"`)
		freshWorker(t, s, "javascript")
		for range 2 {
			r = bob.runIn(t, "run_javascript_code", "javascript_code",
				"await new Promise((r) => setTimeout(r, 100));\ntypeof globalThis.leak")
			wantValue(t, r, `"undefined"`)
			if strings.Contains(r.sc.Stdout, "TIMER") {
				t.Errorf("alice's timer printed in bob's call: %q", r.sc.Stdout)
			}
		}
	})

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
	if len(owner) < 4 {
		t.Errorf("calls ran on %d workers (%v), want at least 4", len(owner), owner)
	}
	// /healthz counts the clients owning workers, and names none behind
	// access control (it is open).
	if h := s.health(t); h.Clients < 2 || h.WorkersByClient != nil {
		t.Errorf("/healthz clients %d, workers_by_client %v: want alice and bob counted, not named", h.Clients, h.WorkersByClient)
	}
}

// freshWorker waits until language's pool has a never-used worker ready:
// the one-worker pools of R and JavaScript start one for bob's first call
// once alice's took theirs, and a webR start takes many seconds of CPU on
// a busy machine, which the test's call need not wait for in line.
func freshWorker(t *testing.T, s *httpServer, language string) {
	t.Helper()
	s.waitHealth(t, "a fresh "+language+" worker", func(h health) bool { return h.Languages[language].WorkersFresh > 0 })
}

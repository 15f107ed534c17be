package main

// Python sessions over HTTP: /mcp stateful and stateless, /sse, /healthz,
// /metrics, config reload, access control and shutdown.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeSessions: a session lives beyond the MCP session that started
// it (another client, another transport continues it); /healthz and
// /metrics count it; a config reload changes the limits and ends no
// session; on SIGTERM its running call finishes, then it ends, logged.
func TestServeSessions(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "pyrun.json")
	if err := os.WriteFile(cfg, []byte(`{"max_sessions": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--config", cfg, "--workers", "1", "--instance-id", "web-1", "--drain-timeout", "60s")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	viaMCP, viaSSE := s.connect(t, "mcp", "", nil), s.connect(t, "sse", "", nil)

	// The schema asks clients to mirror session_id into Mcp-Param-Session-Id.
	tools, err := viaMCP.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	if !strings.Contains(string(schema), `"x-mcp-header":"Session-Id"`) {
		t.Errorf("the input schema does not annotate session_id with x-mcp-header: %s", schema)
	}
	for _, w := range []string{`session_id "new"`, "10m without a call", "8h after it started", "3 sessions"} {
		if !strings.Contains(tools.Tools[0].Description, w) {
			t.Errorf("the tool description does not say %q:\n%s", w, tools.Tools[0].Description)
		}
	}

	r := viaMCP.inSession(t, "new", "x = 1")
	id := r.sc.SessionID
	if !strings.HasPrefix(id, "web-1.") {
		t.Errorf("session id %s does not start with the instance id web-1", id)
	}
	wantValue(t, viaSSE.inSession(t, id, "x += 1\nx"), "2")
	if h := s.health(t); h.SessionsOpen != 1 {
		t.Errorf("/healthz sessions_open %d, want 1", h.SessionsOpen)
	}
	m := s.metrics(t)
	if m["pyrun_python_sessions"] != 1 || m["pyrun_python_session_starts_total"] != 1 || m[`pyrun_calls_total{status="success"}`] != 2 {
		t.Errorf("metrics: %v sessions, %v starts, %v successful calls; want 1, 1, 2",
			m["pyrun_python_sessions"], m["pyrun_python_session_starts_total"], m[`pyrun_calls_total{status="success"}`])
	}
	// Once a session has started, a worker is started ahead for the next.
	for deadline := time.Now().Add(callTimeout); s.metrics(t)["pyrun_python_session_spares"] != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("pyrun_python_session_spares never 1 after a session started: %v", s.metrics(t)["pyrun_python_session_spares"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The first session's worker (started ahead once the pool was ready,
	// or for it) is now its client's session worker (--session-worker
	// shared).
	if got := s.metrics(t)["pyrun_python_session_workers"]; got != 1 {
		t.Errorf("pyrun_python_session_workers %v with one session, want 1", got)
	}

	// A reload lowers the bound: the open session stays, a new one is refused.
	mark := s.log.mark()
	if err := os.WriteFile(cfg, []byte(`{"max_sessions": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log.waitMsg(t, mark, "config reloaded")
	wantValue(t, viaMCP.inSession(t, id, "x"), "2")
	viaMCP.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "new"}, "too many", "max_sessions")
	// The session id in the call log line.
	found := false
	for _, rec := range s.log.since(0) {
		if rec.msg() == "call" && rec.str("session_id") == id && rec.str("status") == "success" {
			found = true
		}
	}
	if !found {
		t.Errorf("no call log line names the Python session %s", id)
	}

	// SIGTERM while a session call runs: it finishes, then the session ends.
	// The call tells the worker's stderr, which pyrun logs, that it runs.
	mark = s.log.mark()
	done := make(chan result, 1)
	go func() {
		r, err := viaMCP.call(context.Background(), map[string]any{
			"python_code": "import asyncio, js\njs.console.error('session call running')\nawait asyncio.sleep(2)\nx * 21",
			"session_id":  id})
		if err != nil {
			t.Errorf("the session call running at SIGTERM: %v", err)
		}
		done <- r
	}()
	s.log.waitMsg(t, mark, "session call running")
	s.signal(syscall.SIGTERM)
	r = <-done
	wantValue(t, r, "42")
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	ended, stopped := -1, -1
	for i, rec := range s.log.since(mark) {
		switch {
		case rec.msg() == "session ended" && rec.str("session_id") == id:
			ended = i
			if rec.str("reason") != "shutdown" {
				t.Errorf("the session ended for %q, want shutdown", rec.str("reason"))
			}
		case rec.msg() == "stopped":
			stopped = i
		}
	}
	if ended < 0 || stopped < ended {
		t.Errorf("the log does not say the session ended before pyrun stopped (lines %d, %d):\n%s", ended, stopped, s.log.tail(20))
	}
}

// TestServeSessionsStateless: over --stateless /mcp every POST stands alone,
// and a session still carries state, also from a second client.
func TestServeSessionsStateless(t *testing.T) {
	s := startServe(t, "--stateless", "--workers", "1")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	a, b := s.connect(t, "mcp", "", nil), s.connect(t, "mcp", "", nil)
	id := a.inSession(t, "new", "def f(n):\n    return n * 2").sc.SessionID
	wantValue(t, b.inSession(t, id, "y = f(21)\ny"), "42")
	wantValue(t, a.inSession(t, id, "y + 1"), "43")
	wantStatus(t, a.run(t, "y"), "run-error")
}

// TestServeSessionsAccess: with access control a session belongs to the
// client that started it; another client's id gets the error of an
// unknown one, and --client-max-sessions bounds each client.
func TestServeSessionsAccess(t *testing.T) {
	tokens, aliceToken, bobToken := twoClients(t)
	s := startServe(t, "--workers", "1", "--auth-token-file", tokens, "--client-max-sessions", "1", "--max-sessions", "3")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	alice, _ := s.mustDial(t, "mcp", aliceToken)
	bob, _ := s.mustDial(t, "sse", bobToken)

	id := alice.inSession(t, "new", "secret = 'alice'").sc.SessionID
	theirs := bob.sessionToolError(t, map[string]any{"python_code": "secret", "session_id": id}, "unknown", `session_id "new"`)
	// Nor can he fork it (docs/sessions.md, Durable sessions).
	bob.sessionToolError(t, map[string]any{"python_code": "secret", "session_id": "fork:" + id}, "unknown")
	unknownID := id[:len(id)-4] + "0000"
	if id[len(id)-4:] == "0000" {
		unknownID = id[:len(id)-4] + "1111"
	}
	unknown := bob.sessionToolError(t, map[string]any{"python_code": "1", "session_id": unknownID}, "unknown")
	if strings.ReplaceAll(theirs, id, "ID") != strings.ReplaceAll(unknown, unknownID, "ID") {
		t.Errorf("another client's session and an unknown one get different errors:\n%s\n%s", theirs, unknown)
	}
	alice.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "new"}, "too many", "client_max_sessions")
	bobs := bob.inSession(t, "new", "secret = 'bob'").sc.SessionID
	wantValue(t, alice.inSession(t, id, "secret"), `"alice"`)
	wantValue(t, bob.inSession(t, bobs, "secret"), `"bob"`)
	// Bob cannot end Alice's session either.
	bob.sessionToolError(t, map[string]any{"python_code": "", "session_id": id, "end_session": true}, "unknown")
	wantValue(t, alice.inSession(t, id, "secret", "end_session", true), `"alice"`)
	// Her place is free again.
	alice.inSession(t, "new", "1")
}

// A session's calls count against its client's places like its stateless
// calls: with client_max_calls 1 and client_max_queue 2, of ten calls sent
// at once (nine to one session and one stateless, each holding its place
// until all have arrived: it waits for a gate file the test makes once
// seven answers are back) three are taken in, one running and two
// waiting, and seven are refused at once as busy. All 120 large calls sent
// behind a busy session used to be taken in, and pyrun held them all.
func TestServeSessionCallsCountAgainstClientLimits(t *testing.T) {
	const token = "alice-Zt1kR0mWx7LcV4pNs2Hq"
	tokens := filepath.Join(t.TempDir(), "tokens")
	saveTokens(t, tokens, "alice:"+token+"\n")
	gate := t.TempDir()
	s := startServe(t, "--workers", "1", "--auth-token-file", tokens, "--client-max-calls", "1", "--client-max-queue", "2",
		"--mount", gate+":/gate")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	alice, _ := s.mustDial(t, "mcp", token)
	id := alice.inSession(t, "new", "1").sc.SessionID

	type outcome struct {
		res *sdk.CallToolResult
		err error
	}
	// Each call waits for the gate (was: slept 4 s, and the three taken
	// in ran one after another).
	const wait = "import os, time\nwhile not os.path.exists('/gate/open'):\n    time.sleep(0.02)\n"
	done := make(chan outcome, 10)
	for i := range 10 {
		args := map[string]any{"python_code": wait, "session_id": id}
		if i == 9 {
			// Held too: a short one that ran and ended before the others
			// arrived would free its place for one more.
			args = map[string]any{"python_code": wait + "3"}
		}
		go func() {
			res, err := alice.callRaw(t.Context(), args)
			done <- outcome{res, err}
		}()
	}
	// The seven refusals come back at once; the gate opens after them,
	// or after a wait that shows fewer were refused.
	var outcomes []outcome
	timeout := time.After(30 * time.Second)
collect:
	for len(outcomes) < 7 {
		select {
		case o := <-done:
			outcomes = append(outcomes, o)
		case <-timeout:
			t.Errorf("%d of ten calls answered within 30 s while the taken ones wait at the gate; want seven refused at once", len(outcomes))
			break collect
		}
	}
	if err := os.WriteFile(filepath.Join(gate, "open"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for len(outcomes) < 10 {
		outcomes = append(outcomes, <-done)
	}
	busy, ran := 0, 0
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			t.Errorf("a call: %v", o.err)
		case o.res.IsError && o.res.StructuredContent == nil:
			if text := textOf(o.res); !strings.Contains(text, "busy") || !strings.Contains(text, "client_max_calls 1") {
				t.Errorf("a refused call: %s", text)
			}
			busy++
		default:
			ran++
		}
	}
	if busy != 7 || ran != 3 {
		t.Errorf("%d calls refused as busy and %d ran; want 7 and 3 (one place, two waiting)", busy, ran)
	}
}

package main

// End-to-end tests of the MCP revisions pyrun serves (docs/contract.md section 12):
// the go-sdk client negotiates 2026-07-28 on stdio and on /mcp, where live
// output follows each request's own log level (_meta
// io.modelcontextprotocol/logLevel), progress flows and a cancelled call
// stops and frees its worker; the TypeScript SDK's client (2025-11-25) does
// the same with logging/setLevel beside it on the same /mcp.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const metaLogLevel = "io.modelcontextprotocol/logLevel"

// callAt calls run_python_code with progress token tok and, unless level is
// empty, the request's own log level in _meta (2026-07-28).
func (s *server) callAt(ctx context.Context, level, tok, code string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	p := &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": code}}
	if level != "" {
		p.Meta = sdk.Meta{metaLogLevel: level}
	}
	p.SetProgressToken(tok)
	res, err := s.session.CallTool(ctx, p)
	if err != nil {
		return result{}, err
	}
	return checkResult(res)
}

// checkRevision20260728 runs the live-output, progress and cancellation
// checks on a session that negotiated 2026-07-28 with a one-worker pyrun.
func checkRevision20260728(t *testing.T, s *server, n *notes) {
	if v := s.session.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	code := "import sys, time\nfor i in range(4):\n    print(f'line {i}')\n    print(f'warn {i}', file=sys.stderr)\n    time.sleep(0.1)\n"

	t.Run("the request's log level", func(t *testing.T) {
		// No level: the spec sends no log messages. "warning": stderr
		// only. "info": both. Notifications are handled in order, so once
		// the last call's messages are in, the earlier calls' are too.
		for _, c := range []struct{ level, tok string }{{"", "no-level"}, {"warning", "warning"}, {"info", "info"}} {
			r, err := s.callAt(t.Context(), c.level, c.tok, code)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, r, "success")
			if !strings.Contains(r.sc.Stdout, "line 3") || !strings.Contains(r.sc.Stderr, "warn 3") {
				t.Errorf("level %q: the result must carry all the output: %+v", c.level, r.sc)
			}
		}
		n.waitLogs(t, "info", "stdout and stderr at level info",
			func(l []logNote) bool { return hasStream("stdout", "line 3")(l) && hasStream("stderr", "warn 3")(l) })
		if got := n.logsFor("no-level"); len(got) != 0 {
			t.Errorf("a request without a log level got log messages %+v", got)
		}
		got := n.waitLogs(t, "warning", "stderr at level warning", hasStream("stderr", "warn 3"))
		for _, l := range got {
			if l.data.Stream == "stdout" {
				t.Errorf("a request at level warning got stdout (level info): %+v", l)
			}
		}
	})

	t.Run("progress", func(t *testing.T) {
		r, err := s.callAt(t.Context(), "info", "progress", "import time\ntime.sleep(1.5)\nprint('done')")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		n.waitProgress(t, "progress", "running for")
	})

	t.Run("cancellation frees the worker", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.callAt(ctx, "info", "forever", "while True:\n    pass\n")
			done <- err
		}()
		n.waitProgress(t, "forever", "running for")
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("the cancelled call returned a result")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled call did not return")
		}
		// One worker: this call runs only once the cancelled one stopped
		// (its time limit is far beyond the bound).
		began := time.Now()
		r, err := s.callAt(t.Context(), "info", "after-cancel", "print('after')")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		if d := time.Since(began); d > 30*time.Second {
			t.Errorf("the next call took %v: the cancelled call kept its worker", d)
		}
	})
}

// TestRevision20260728Stdio: over stdio the go-sdk client negotiates
// 2026-07-28 (server/discover, no initialize).
func TestRevision20260728Stdio(t *testing.T) {
	needBinary(t)
	n := newNotes()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServerWith(ctx, n.clientOptions(),
		"--workers", "1", "--timeout", "10m", "--progress-interval", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)
	checkRevision20260728(t, s, n)
}

// TestRevisionsServe: one pyrun serve answers the go-sdk client at
// 2026-07-28 (stateless requests) and, beside it, older sessions: the
// go-sdk client pinned to 2025-11-25 and the TypeScript SDK's client,
// whose log level is the session's (logging/setLevel).
func TestRevisionsServe(t *testing.T) {
	srv := startServe(t, "--workers", "1", "--timeout", "10m", "--progress-interval", "200ms")

	t.Run("2026-07-28", func(t *testing.T) {
		n := newNotes()
		s := srv.connectRevision(t, "", n.clientOptions())
		checkRevision20260728(t, s, n)
		if got := srv.metrics(t)["pyrun_sessions"]; got != 0 {
			t.Errorf("pyrun_sessions %v after 2026-07-28 calls, want 0: they hold no session", got)
		}
	})

	t.Run("2025-11-25 beside it", func(t *testing.T) {
		n := newNotes()
		s := srv.connectRevision(t, "2025-11-25", n.clientOptions())
		if v := s.session.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Fatalf("negotiated %q, want 2025-11-25", v)
		}
		if s.session.ID() == "" {
			t.Fatal("a 2025-11-25 client got no Mcp-Session-Id: /mcp must stay stateful for it")
		}
		s.setLevel(t, "info")
		// The session's level applies; a _meta level is not part of
		// this revision and changes nothing.
		r, err := s.callAt(t.Context(), "error", "legacy", "print('legacy line')")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		n.waitLogs(t, "legacy", "stdout at the session's level", hasStream("stdout", "legacy line"))
	})

	t.Run("/sse with the go-sdk client's defaults", func(t *testing.T) {
		// HTTP+SSE has no 2026-07-28: the client falls back to initialize.
		tr := &sdk.SSEClientTransport{Endpoint: srv.base + "/sse"}
		client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-revisions-e2e", Version: "test"}, nil)
		cs, err := client.Connect(t.Context(), tr, nil)
		if err != nil {
			t.Fatalf("connect to /sse: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Errorf("over /sse the client negotiated %q, want 2025-11-25", v)
		}
		wantValue(t, (&server{session: cs}).run(t, "6 * 7"), "42")
	})

	t.Run("TypeScript SDK client", func(t *testing.T) {
		rep := runTSClient(t, srv.base+"/mcp")
		if rep.ProtocolVersion != "2025-11-25" {
			t.Errorf("the TypeScript client negotiated %q, want 2025-11-25", rep.ProtocolVersion)
		}
		var lines []string
		for _, l := range rep.Logs {
			if l.Text == "before-level\n" {
				t.Errorf("output of a call made before logging/setLevel came as a log message: %+v", l)
			}
			if l.Stream == "stdout" {
				lines = append(lines, l.Text)
			}
		}
		if all := strings.Join(lines, ""); !strings.Contains(all, "line 0") || !strings.Contains(all, "line 5") {
			t.Errorf("stdout log messages %q, want the six lines", lines)
		}
		if rep.Live.IsError || !strings.Contains(rep.Live.Text, "line 5") {
			t.Errorf("the live call's result: %+v", rep.Live)
		}
		if len(rep.Progress) == 0 {
			t.Error("no progress notifications for a call with a progress token")
		}
		if rep.Cancelled == nil || !rep.Cancelled.Rejected {
			t.Errorf("the aborted call: %+v, want it rejected", rep.Cancelled)
		}
		if rep.After == nil || rep.After.IsError || !strings.Contains(rep.After.Text, "after") || rep.After.MS > 30000 {
			t.Errorf("the call after the cancelled one: %+v, want it to run at once on the freed worker", rep.After)
		}
	})
}

// connectRevision opens a session on srv's /mcp with the go-sdk client,
// asking for revision (its latest when empty).
func (srv *httpServer) connectRevision(t *testing.T, revision string, opts *sdk.ClientOptions) *server {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: srv.base + "/mcp", MaxRetries: -1}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-revisions-e2e", Version: "test"}, opts)
	cs, err := client.Connect(t.Context(), tr, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect to %s/mcp at %q: %v", srv.base, revision, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &server{session: cs}
}

// tsReport is what testdata/tsclient/client.mjs prints.
type tsReport struct {
	ProtocolVersion string `json:"protocolVersion"`
	Logs            []struct {
		Level  string `json:"level"`
		Stream string `json:"stream"`
		Text   string `json:"text"`
	} `json:"logs"`
	Progress []struct {
		Progress float64 `json:"progress"`
		Message  string  `json:"message"`
	} `json:"progress"`
	Live struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"live"`
	Cancelled *struct {
		Rejected bool   `json:"rejected"`
		Error    string `json:"error"`
	} `json:"cancelled"`
	After *struct {
		IsError bool    `json:"isError"`
		Text    string  `json:"text"`
		MS      float64 `json:"ms"`
	} `json:"after"`
}

// tsClientDir is testdata/tsclient, its pinned packages installed (npm ci)
// on first use.
func tsClientDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); errors.Is(err, os.ErrNotExist) {
		cmd := exec.CommandContext(t.Context(), "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s (the TypeScript SDK): %v\n%s", dir, err, out)
		}
	}
	return dir
}

// runTSClient runs the TypeScript SDK client against url, installing its
// pinned packages (npm ci) on first use.
func runTSClient(t *testing.T, url string) tsReport {
	t.Helper()
	var rep tsReport
	runTSScript(t, &rep, "client.mjs", url)
	return rep
}

// runTSScript runs script of testdata/tsclient with node and args, for at
// most three minutes, and decodes the JSON report it prints into rep.
func runTSScript(t *testing.T, rep any, script string, args ...string) {
	t.Helper()
	dir := tsClientDir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(out, rep); err != nil {
		t.Fatalf("the TypeScript client %s's report %q: %v", script, out, err)
	}
}

package main

// End-to-end tests of live runs (docs/contract.md section 7) over stdio: output
// reaches the client as log messages while the call runs, progress flows for
// requests with a progress token, and notifications/cancelled stops a call
// and frees its worker. They share one one-worker server, so that queueing
// is easy to arrange; its subtests run in order, each leaving the worker
// free for the next.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// notes records the notifications a client session receives, with the time
// each arrived.
type notes struct {
	mu       sync.Mutex
	logs     []logNote
	progress []progressNote
	changed  chan struct{} // closed and replaced on every notification
}

type logNote struct {
	at     time.Time
	level  string
	logger string
	data   logData
}

// logData mirrors the data of pyrun's log messages (mcp.LogData).
type logData struct {
	CallID        string `json:"call_id"`
	ProgressToken any    `json:"progress_token"`
	Stream        string `json:"stream"`
	Text          string `json:"text"`
}

type progressNote struct {
	at       time.Time
	token    any
	progress float64
	message  string
}

func newNotes() *notes { return &notes{changed: make(chan struct{})} }

func (n *notes) clientOptions() *sdk.ClientOptions {
	return &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			note := logNote{at: time.Now(), level: string(r.Params.Level), logger: r.Params.Logger}
			raw, _ := json.Marshal(r.Params.Data)
			if err := json.Unmarshal(raw, &note.data); err != nil {
				note.data.Text = fmt.Sprintf("undecodable data %s: %v", raw, err)
			}
			n.mu.Lock()
			n.logs = append(n.logs, note)
			n.notify()
			n.mu.Unlock()
		},
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			n.mu.Lock()
			n.progress = append(n.progress, progressNote{
				at: time.Now(), token: r.Params.ProgressToken, progress: r.Params.Progress, message: r.Params.Message,
			})
			n.notify()
			n.mu.Unlock()
		},
	}
}

func (n *notes) notify() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// logsFor returns the log messages about the call with progress token tok.
func (n *notes) logsFor(tok string) []logNote {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []logNote
	for _, l := range n.logs {
		if l.data.ProgressToken == tok {
			out = append(out, l)
		}
	}
	return out
}

// progressFor returns the progress notifications for token tok.
func (n *notes) progressFor(tok string) []progressNote {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []progressNote
	for _, p := range n.progress {
		if p.token == tok {
			out = append(out, p)
		}
	}
	return out
}

// waitProgress waits for a progress notification for tok whose message
// contains word.
func (n *notes) waitProgress(t *testing.T, tok, word string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	for {
		n.mu.Lock()
		ch := n.changed
		found := slices.ContainsFunc(n.progress, func(p progressNote) bool {
			return p.token == tok && strings.Contains(p.message, word)
		})
		n.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no progress notification for %s saying %q; got %v", tok, word, n.progressFor(tok))
		}
	}
}

// waitLogs waits until the log messages about the call with progress token
// tok satisfy cond, and returns them. The client handles notifications in
// order, but a result may overtake the handling of the notifications sent
// before it, so a test waits for what it expects rather than looking once.
func (n *notes) waitLogs(t *testing.T, tok, what string, cond func([]logNote) bool) []logNote {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		n.mu.Lock()
		ch := n.changed
		n.mu.Unlock()
		logs := n.logsFor(tok)
		if cond(logs) {
			return logs
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s; the log messages for %s: %+v", what, tok, logs)
		}
	}
}

func hasStream(stream, word string) func([]logNote) bool {
	return func(logs []logNote) bool {
		return slices.ContainsFunc(logs, func(l logNote) bool {
			return l.data.Stream == stream && strings.Contains(l.data.Text, word)
		})
	}
}

// callWith calls run_python_code with progress token tok.
func (s *server) callWith(ctx context.Context, tok string, args map[string]any) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	p := &sdk.CallToolParams{Name: "run_python_code", Arguments: args}
	p.SetProgressToken(tok)
	res, err := s.session.CallTool(ctx, p)
	if err != nil {
		return result{}, err
	}
	return checkResult(res)
}

// pending is a call running in the background.
type pending struct {
	cancel context.CancelFunc
	done   chan error
	res    result
}

func (s *server) start(t *testing.T, tok, code string) *pending {
	ctx, cancel := context.WithCancel(t.Context())
	p := &pending{cancel: cancel, done: make(chan error, 1)}
	go func() {
		var err error
		p.res, err = s.callWith(ctx, tok, map[string]any{"python_code": code})
		p.done <- err
	}()
	t.Cleanup(cancel)
	return p
}

func (s *server) setLevel(t *testing.T, level string) {
	t.Helper()
	if err := s.session.SetLoggingLevel(t.Context(), &sdk.SetLoggingLevelParams{Level: sdk.LoggingLevel(level)}); err != nil {
		t.Fatal(err)
	}
}

func TestLive(t *testing.T) {
	needBinary(t)
	n := newNotes()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	// These tests set the session's log level (logging/setLevel): they
	// speak 2025-11-25. revisions_test.go tests 2026-07-28's level per request.
	s, err := startServerAt(ctx, sessionRevision, n.clientOptions(),
		"--workers", "1", "--network", "all", "--progress-interval", "250ms", "--max-output", "4KiB")
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)

	t.Run("no level set: no log messages", func(t *testing.T) {
		// In the 2025 revisions this test speaks, a session gets log
		// messages only once it has set a level (logging/setLevel).
		r, err := s.callWith(t.Context(), "quiet", map[string]any{
			"python_code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nprint('x' * 5000)",
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		if !strings.HasPrefix(r.sc.Stdout, "out\n") || r.sc.Stderr != "err\n" {
			t.Errorf("stdout %q, stderr %q: the result must carry all the output", r.sc.Stdout, r.sc.Stderr)
		}
		// Once the client sets a level, messages flow; any message about the
		// first call would have come before them.
		s.setLevel(t, "info")
		if _, err := s.callWith(t.Context(), "sentinel", map[string]any{"python_code": "print('sentinel')"}); err != nil {
			t.Fatal(err)
		}
		n.waitLogs(t, "sentinel", "the sentinel line", hasStream("stdout", "sentinel"))
		if logs := n.logsFor("quiet"); len(logs) != 0 {
			t.Errorf("%d log messages before the client set a level: %+v", len(logs), logs)
		}
	})

	t.Run("lines arrive while the call runs", func(t *testing.T) {
		s.setLevel(t, "debug")
		code := `import sys, time
for i in range(10):
    print(f"line {i}", file=sys.stderr if i % 3 == 2 else sys.stdout)
    time.sleep(0.2)
`
		began := time.Now()
		r, err := s.callWith(t.Context(), "lines", map[string]any{"python_code": code})
		returned := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		logs := n.waitLogs(t, "lines", "all ten lines", hasStream("stdout", "line 9"))
		var streamed []chunk
		var times []time.Time
		for _, l := range logs {
			if l.logger != "pyrun" || l.data.CallID == "" {
				t.Errorf("log message with logger %q, call_id %q; want pyrun and the call's id", l.logger, l.data.CallID)
			}
			want := map[string]string{"stdout": "info", "stderr": "warning"}[l.data.Stream]
			if want == "" {
				t.Errorf("unexpected log message %+v", l)
				continue
			}
			if l.level != want {
				t.Errorf("%s at level %s, want %s", l.data.Stream, l.level, want)
			}
			streamed = append(streamed, chunk{l.data.Stream, l.data.Text})
			times = append(times, l.at)
		}
		// The messages tell the output in the order written, as
		// structuredContent.output does.
		if got, want := mergeChunks(streamed), mergeChunks(r.sc.Output); !slicesEqual(got, want) {
			t.Errorf("log messages carried %v, structuredContent.output %v", got, want)
		}
		if len(times) < 5 {
			t.Fatalf("%d log messages for 10 lines written 200 ms apart; want them sent as they come, not batched at the end", len(times))
		}
		first, last := times[0], times[len(times)-1]
		t.Logf("%d messages; first %v after the call, last %v; result %v after the call",
			len(times), first.Sub(began).Round(time.Millisecond), last.Sub(began).Round(time.Millisecond),
			returned.Sub(began).Round(time.Millisecond))
		if d := returned.Sub(first); d < 1200*time.Millisecond {
			t.Errorf("the first line arrived only %v before the result; want well over a second", d)
		}
		if d := last.Sub(first); d < 1200*time.Millisecond {
			t.Errorf("the messages span %v; want them spread over the run (~1.8 s)", d)
		}
	})

	t.Run("notices and packages", func(t *testing.T) {
		// max-output is 4KiB: the cut is pyrun's notice.
		r, err := s.callWith(t.Context(), "cut", map[string]any{"python_code": "print('y' * 6000)"})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		logs := n.waitLogs(t, "cut", "pyrun's notice", hasStream("pyrun", "max_output"))
		if l := logs[len(logs)-1]; l.level != "notice" {
			t.Errorf("the notice about max_output came at level %s, want notice", l.level)
		}
		// Loading a package is debug; this machine has no package index, so
		// the load itself fails.
		if _, err := s.callWith(t.Context(), "pkg", map[string]any{"python_code": "import numpy"}); err != nil {
			t.Fatal(err)
		}
		logs = n.waitLogs(t, "pkg", "package loading", hasStream("packages", "numpy"))
		for _, l := range logs {
			if l.data.Stream == "packages" && l.level != "debug" {
				t.Errorf("package loading at level %s, want debug: %q", l.level, l.data.Text)
			}
		}
	})

	t.Run("progress for a running and a queued call", func(t *testing.T) {
		a := s.start(t, "running", "import time\ntime.sleep(1.2)\n'a'")
		n.waitProgress(t, "running", "running for")
		b := s.start(t, "queued", "'b'")
		n.waitProgress(t, "queued", "next in line")
		for _, p := range []*pending{a, b} {
			if err := <-p.done; err != nil {
				t.Fatal(err)
			}
			wantStatus(t, p.res, "success")
		}
		for _, tok := range []string{"running", "queued"} {
			ps := n.progressFor(tok)
			t.Logf("%s: %d progress notifications", tok, len(ps))
			for i, p := range ps {
				t.Logf("  %.3f %s", p.progress, p.message)
				if i > 0 && p.progress <= ps[i-1].progress {
					t.Errorf("%s: progress went from %v to %v; it must increase", tok, ps[i-1].progress, p.progress)
				}
			}
		}
		// The sleep runs 1.2 s with a progress interval of 250ms.
		if k := len(n.progressFor("running")); k < 3 || k > 8 {
			t.Errorf("%d progress notifications for a 1.2 s call every 250ms; want 3 to 8", k)
		}
		if ps := n.progressFor("queued"); !strings.Contains(ps[len(ps)-1].message, "running") &&
			!strings.Contains(ps[len(ps)-1].message, "starting") {
			t.Errorf("the queued call's last progress says %q; want it started", ps[len(ps)-1].message)
		}
	})

	for _, tc := range []struct{ name, code string }{
		{"cancel a busy loop", "print('started', flush=True)\nwhile True:\n    pass\n"},
		{"cancel time.sleep", "import time\nprint('started', flush=True)\ntime.sleep(100)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := strings.ReplaceAll(tc.name, " ", "-")
			retired, cancelled := s.log.count("retiring worker"), s.log.count("call cancelled")
			p := s.start(t, tok, tc.code)
			n.waitProgress(t, tok, "running for") // it runs on the one worker
			at := time.Now()
			p.cancel()
			if err := <-p.done; err == nil {
				t.Fatal("the cancelled call returned no error to its client")
			}
			r := s.run(t, "6 * 7")
			freed := time.Since(at)
			wantValue(t, r, "42")
			t.Logf("worker free and the next call answered %v after the cancel", freed.Round(time.Millisecond))
			if freed > 1500*time.Millisecond {
				t.Errorf("the next call answered %v after the cancel; want the worker freed within a second", freed)
			}
			wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer wcancel()
			if err := s.log.waitFor(wctx, "pyrun's log of the cancellation", func(c map[string]int) bool {
				return c["call cancelled"] > cancelled
			}); err != nil {
				t.Error(err)
			}
			if got := s.log.count("retiring worker"); got != retired {
				t.Errorf("the worker was retired; the interrupt should have stopped the call")
			}
		})
	}

	t.Run("a cancelled queued call never runs", func(t *testing.T) {
		var mu sync.Mutex
		var hits []string
		web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits = append(hits, r.URL.Query().Get("who"))
			mu.Unlock()
		}))
		defer web.Close()
		fetch := "import pyodide.http\nr = await pyodide.http.pyfetch(URL + '?who=' + WHO)\nr.status"

		holder := s.start(t, "holder", "import time\ntime.sleep(100)\n")
		n.waitProgress(t, "holder", "running for")
		ctx, cancel := context.WithCancel(t.Context())
		queued := make(chan error, 1)
		go func() {
			_, err := s.callWith(ctx, "doomed", map[string]any{
				"python_code": fetch, "global_variables": map[string]any{"URL": web.URL, "WHO": "doomed"},
			})
			queued <- err
		}()
		n.waitProgress(t, "doomed", "next in line")
		cancelled := s.log.count("call cancelled")
		cancel()
		if err := <-queued; err == nil {
			t.Fatal("the cancelled call returned no error to its client")
		}
		// Let the worker go only once pyrun has dropped the call from the line.
		wctx, wcancel := context.WithTimeout(t.Context(), callTimeout)
		defer wcancel()
		if err := s.log.waitFor(wctx, "the queued call's cancellation", func(c map[string]int) bool {
			return c["call cancelled"] > cancelled
		}); err != nil {
			t.Fatal(err)
		}
		holder.cancel()
		<-holder.done

		// The same code, not cancelled, does reach the web server.
		r := s.mustCall(t, map[string]any{
			"python_code": fetch, "global_variables": map[string]any{"URL": web.URL, "WHO": "control"},
		})
		wantValue(t, r, "200")
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(hits, []string{"control"}) {
			t.Errorf("the web server saw %q; want only the control call", hits)
		}
	})

	t.Run("level error filters output", func(t *testing.T) {
		s.setLevel(t, "error")
		// Output on both streams, then a call that ignores the interrupt at
		// its time limit: its worker is killed, which is an error.
		r, err := s.callWith(t.Context(), "filtered", map[string]any{
			"python_code": "import sys, time\nprint('out')\nprint('err', file=sys.stderr)\n" +
				"while True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass\n",
			"timeout_seconds": 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "timeout")
		// Messages come in order: had stdout or stderr got through, they
		// would be here before the kill.
		logs := n.waitLogs(t, "filtered", "the kill", hasStream("pyrun", "killed"))
		for _, l := range logs {
			if l.level != "error" {
				t.Errorf("a %s message (%s: %q) reached a session at level error", l.level, l.data.Stream, l.data.Text)
			}
		}
	})
}

func slicesEqual(a, b []chunk) bool { return slices.Equal(a, b) }

// TestServeLive: through pyrun serve, over Streamable HTTP and HTTP+SSE, a
// call's lines reach its session as log messages while it runs, and
// progress notifications follow it.
func TestServeLive(t *testing.T) {
	srv := startServe(t, "--workers", "1", "--progress-interval", "250ms")
	code := "import time\nfor i in range(10):\n    print(f'line {i}')\n    time.sleep(0.2)\n"
	for _, transport := range []string{"mcp", "sse"} {
		t.Run(transport, func(t *testing.T) {
			n := newNotes()
			s := srv.connectWith(t, transport, "", nil, n.clientOptions())
			s.setLevel(t, "info")
			tok := "live-" + transport
			began := time.Now()
			r, err := s.callWith(t.Context(), tok, map[string]any{"python_code": code})
			returned := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, r, "success")
			logs := n.waitLogs(t, tok, "all ten lines", hasStream("stdout", "line 9"))
			var lines []logNote
			for _, l := range logs {
				if l.data.Stream == "stdout" {
					lines = append(lines, l)
				}
			}
			if len(lines) < 5 {
				t.Fatalf("%d log messages for 10 lines written 200 ms apart; want them as they come", len(lines))
			}
			first := lines[0].at
			t.Logf("%d messages; the first %v after the call, the result %v after it", len(lines),
				first.Sub(began).Round(time.Millisecond), returned.Sub(began).Round(time.Millisecond))
			if d := returned.Sub(first); d < 1200*time.Millisecond {
				t.Errorf("the first line arrived only %v before the result; want well over a second", d)
			}
			if got := n.progressFor(tok); len(got) < 2 || !strings.Contains(got[len(got)-1].message, "running for") {
				t.Errorf("progress notifications %+v, want a few, while the call runs", got)
			}
		})
	}
}

package main

// End-to-end tests of `pyrun serve`: the binary built by TestMain, listening
// on a loopback port of its choosing, driven over real HTTP by the go-sdk's
// MCP clients (StreamableClientTransport and SSEClientTransport), by plain
// HTTP for /healthz and /metrics, and by signals.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp/mcptest"
)

// ---- the shared server --------------------------------------------------------

// TestServe runs the cases that can share one two-worker server.
func TestServe(t *testing.T) {
	s := startServe(t, "--workers", "2", "--keep-alive", "300ms", "--log-level", "debug")

	t.Run("HealthBeforeWorkersAreReady", func(t *testing.T) {
		// pyrun listens at once; workers take a second or more to start.
		if h := s.health(t); h.code != http.StatusServiceUnavailable || h.WorkersReady != 0 || h.WorkersTotal != 2 {
			t.Errorf("/healthz right after start = %+v, want 503 with 0 of 2 workers ready", h)
		}
		h := s.waitHealth(t, "two ready workers", func(h health) bool { return h.WorkersIdle == 2 })
		if h.code != http.StatusOK || h.Status != "ok" || h.Queued != 0 {
			t.Errorf("/healthz = %+v, want 200 ok", h)
		}
		// The machine pyrun is tested on offers every layer of the OS
		// sandbox (docs/architecture.md, Facts), and --os-sandbox auto takes them all.
		if w := h.OSSandbox; w.Mode != "auto" || strings.Join(w.Layers, ",") != "rlimits,no_new_privs,landlock,seccomp,netns" ||
			len(w.Missing) != 0 || w.LandlockABI < 6 {
			t.Errorf("/healthz os_sandbox = %+v, want every layer", w)
		}
		m := s.metrics(t)
		for _, l := range []string{"rlimits", "no_new_privs", "landlock", "seccomp", "netns"} {
			if got := m[`pyrun_os_sandbox_layer{layer="`+l+`"}`]; got != 1 {
				t.Errorf("pyrun_os_sandbox_layer{layer=%q} = %v, want 1", l, got)
			}
		}
	})

	t.Run("SessionsDoNotMix", func(t *testing.T) {
		// Two Streamable HTTP sessions and one HTTP+SSE session, three calls
		// each at once on two workers; every output stays with its call.
		mark := s.log.mark()
		sessions := map[string]*server{
			"mcp-a": s.connect(t, "mcp", "", nil),
			"mcp-b": s.connect(t, "mcp", "", nil),
			"sse-c": s.connect(t, "sse", "", nil),
		}
		code := "import asyncio, sys\nfor i in range(40):\n    print(TAG, i, file=sys.stderr if i % 4 == 0 else sys.stdout)\n    await asyncio.sleep(0.002)\nTAG"
		type outcome struct {
			tag string
			r   result
			err error
		}
		var wg sync.WaitGroup
		out := make(chan outcome, 9)
		for name, c := range sessions {
			for i := range 3 {
				tag := fmt.Sprintf("%s-%d", name, i)
				wg.Go(func() {
					r, err := c.call(t.Context(), map[string]any{"python_code": code, "global_variables": map[string]any{"TAG": tag}})
					out <- outcome{tag, r, err}
				})
			}
		}
		wg.Wait()
		close(out)
		for o := range out {
			if o.err != nil {
				t.Errorf("%s: %v", o.tag, o.err)
				continue
			}
			wantStatus(t, o.r, "success")
			wantValue(t, o.r, strconv.Quote(o.tag))
			n := 0
			for _, c := range o.r.sc.Output {
				for line := range strings.Lines(c.Text) {
					n++
					if !strings.HasPrefix(line, o.tag+" ") {
						t.Errorf("%s got a foreign line %q", o.tag, line)
					}
				}
			}
			if n != 40 {
				t.Errorf("%s: %d lines of output, want 40", o.tag, n)
			}
		}
		// One log line per call, naming its session.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		n := 0
		if _, err := s.log.wait(ctx, mark, func(r logRecord) bool {
			if r.msg() == "call" {
				n++
			}
			return n == 9
		}); err != nil {
			t.Errorf("%d call log lines for 9 calls: %v", n, err)
		}
		sessionsSeen := map[string]int{}
		for _, r := range s.log.since(mark) {
			if r.msg() != "call" {
				continue
			}
			for _, k := range []string{"id", "status", "duration", "worker", "session"} {
				if v, ok := r[k]; !ok || v == "" {
					t.Errorf("call log line without %s: %v", k, r)
				}
			}
			sessionsSeen[r.str("session")]++
		}
		if len(sessionsSeen) != 3 {
			t.Errorf("call log lines name sessions %v, want 3 sessions with 3 calls each", sessionsSeen)
		}
		for name, n := range sessionsSeen {
			if n != 3 {
				t.Errorf("session %s has %d call log lines, want 3", name, n)
			}
		}
	})

	t.Run("MetricsMove", func(t *testing.T) {
		c := s.connect(t, "mcp", "", nil)
		s.waitHealth(t, "two ready workers", func(h health) bool { return h.WorkersIdle == 2 })
		before := s.metrics(t)
		wantStatus(t, c.run(t, "1 + 1"), "success")
		wantStatus(t, c.run(t, "1 / 0"), "run-error")
		// A C loop ignores the interrupt: its worker is killed and replaced.
		r := c.mustCall(t, map[string]any{"python_code": "sum(range(10**13))", "timeout_seconds": 0.5})
		wantStatus(t, r, "timeout")
		after := s.metrics(t)
		for series, delta := range map[string]float64{
			`pyrun_calls_total{status="success"}`:             1,
			`pyrun_calls_total{status="run-error"}`:           1,
			`pyrun_calls_total{status="timeout"}`:             1,
			`pyrun_calls_total{status="rejected"}`:            0,
			`pyrun_call_duration_seconds_count`:               3,
			`pyrun_queue_wait_seconds_count`:                  3,
			`pyrun_worker_restarts_total{reason="interrupt"}`: 1,
		} {
			if got := after[series] - before[series]; got != delta {
				t.Errorf("%s went from %v to %v, want +%v", series, before[series], after[series], delta)
			}
		}
		if got := after[`pyrun_call_duration_seconds_bucket{le="0.25"}`] - before[`pyrun_call_duration_seconds_bucket{le="0.25"}`]; got < 2 {
			t.Errorf("the two quick calls are not in the 0.25s bucket (+%v)", got)
		}
		if after["pyrun_sessions"] < 1 || after["pyrun_workers_configured"] != 2 {
			t.Errorf("pyrun_sessions %v, pyrun_workers_configured %v; want >= 1 and 2", after["pyrun_sessions"], after["pyrun_workers_configured"])
		}

		// Three two-second calls on two workers: two busy, one queued.
		s.waitHealth(t, "the killed worker's replacement", func(h health) bool { return h.WorkersIdle >= 2 && h.WorkersStarting == 0 })
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if r, err := c.call(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(2)"}); err != nil {
					t.Error(err)
				} else {
					wantStatus(t, r, "success")
				}
			})
		}
		h := s.waitHealth(t, "two busy workers and one queued call", func(h health) bool { return h.WorkersBusy == 2 && h.Queued == 1 })
		// Ready counts the busy workers too, besides any fresh idle one the
		// pool started beside the client's (workers belong to a client).
		if h.code != http.StatusOK || h.WorkersReady != h.WorkersBusy+h.WorkersIdle {
			t.Errorf("/healthz with every worker busy = %+v, want 200 with the 2 busy among the ready", h)
		}
		m := s.metrics(t)
		if m[`pyrun_workers{state="busy"}`] != 2 || m["pyrun_queue_depth"] != 1 {
			t.Errorf("busy workers %v, queue depth %v; want 2 and 1", m[`pyrun_workers{state="busy"}`], m["pyrun_queue_depth"])
		}
		wg.Wait()
		// A worker counts as busy until it has cleaned up after its call,
		// which ends after the result has gone out.
		s.waitHealth(t, "the workers back from their calls", func(h health) bool { return h.WorkersBusy == 0 })
		m = s.metrics(t)
		// Idle counts the client's two workers back from their calls and the
		// fresh ones the pool started beside them (workers belong to a client).
		if m[`pyrun_workers{state="busy"}`] != 0 || m["pyrun_queue_depth"] != 0 || m[`pyrun_workers{state="idle"}`]-m["pyrun_workers_fresh"] != 2 {
			t.Errorf("after the calls: busy workers %v, queue depth %v, idle workers %v of which fresh %v; want 0, 0 and 2 used", m[`pyrun_workers{state="busy"}`], m["pyrun_queue_depth"], m[`pyrun_workers{state="idle"}`], m["pyrun_workers_fresh"])
		}
		if q := m[`pyrun_queue_wait_seconds_bucket{le="1"}`]; m["pyrun_queue_wait_seconds_count"]-q < 1 {
			t.Errorf("no queue wait above 1s recorded, though one call waited 2s")
		}
	})

	t.Run("LongCallsSurviveIdleTimeouts", func(t *testing.T) {
		// A client that gives up on a connection quiet for 1.5s, as httpx's
		// read timeout and proxies do, keeps a 3s call: the server sends
		// keep-alive comments every 300ms. The two transports' calls run
		// at once, on the server's two workers.
		hc := mcptest.IdleTimeoutClient(1500 * time.Millisecond)
		var wg sync.WaitGroup
		for _, transport := range []string{"mcp", "sse"} {
			c := s.connect(t, transport, "", hc)
			wg.Go(func() {
				r, err := c.call(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(3)\n'slept'"})
				if err != nil || r.sc.Status != "success" {
					t.Errorf("%s: %v, status %q; text:\n%s", transport, err, r.sc.Status, r.text)
				}
			})
		}
		wg.Wait()
	})

	t.Run("BehindPrefixProxy", func(t *testing.T) {
		// A reverse proxy serves pyrun under /pyrun/, strips the prefix and
		// says so in X-Forwarded-Prefix: the SSE client must be sent to
		// /pyrun/sse?sessionid=..., through the proxy.
		target, _ := url.Parse(s.base)
		var viaProxy sync.Map
		proxy := httptest.NewServer(&httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, "/pyrun")
				r.Out.URL.RawPath = ""
				r.Out.Header.Set("X-Forwarded-Prefix", "/pyrun")
				viaProxy.Store(r.In.Method+" "+r.In.URL.Path, true)
			},
			FlushInterval: -1,
		})
		t.Cleanup(proxy.Close) // after the sessions' cleanups, which run first
		for _, transport := range []string{"sse", "mcp"} {
			c := s.connect(t, transport, proxy.URL+"/pyrun/"+transport, nil)
			wantValue(t, c.run(t, "6 * 7"), "42")
		}
		for _, want := range []string{"GET /pyrun/sse", "POST /pyrun/sse", "POST /pyrun/mcp"} {
			if _, ok := viaProxy.Load(want); !ok {
				t.Errorf("no %s went through the proxy", want)
			}
		}
	})
}

// ---- servers of their own -------------------------------------------------------

func TestServeStateless(t *testing.T) {
	s := startServe(t, "--stateless", "--workers", "1", "--keep-alive", "0")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	c := s.connect(t, "mcp", "", nil)
	for i := range 3 {
		r := c.mustCall(t, map[string]any{"python_code": fmt.Sprintf("x = %d\nx * 2", i)})
		wantValue(t, r, strconv.Itoa(2*i))
		// Warm: a stateless call reuses the pool (mcp-run-python starts an
		// interpreter per stateless call: about a second).
		if r.sc.DurationMS > 1000 {
			t.Errorf("stateless call %d took %v ms: not served warm", i, r.sc.DurationMS)
		}
	}
	m := s.metrics(t)
	if m[`pyrun_calls_total{status="success"}`] != 3 || m[`pyrun_worker_restarts_total{reason="crash"}`] != 0 {
		t.Errorf("metrics: %v successes, %v restarts; want 3 and 0", m[`pyrun_calls_total{status="success"}`], m[`pyrun_worker_restarts_total{reason="crash"}`])
	}
	if m[`pyrun_worker_starts_total{from="snapshot"}`] != 1 || m[`pyrun_worker_starts_total{from="plain"}`] != 0 {
		t.Errorf("metrics: %v starts from the snapshot, %v plain; want the worker started from the snapshot",
			m[`pyrun_worker_starts_total{from="snapshot"}`], m[`pyrun_worker_starts_total{from="plain"}`])
	}
	// No session: no Mcp-Session-Id, and GET (a session's stream) is refused.
	mcptest.Stateless(t, s.front())
	// Without keep-alive comments, a client that drops quiet connections
	// loses a long call: the control for LongCallsSurviveIdleTimeouts.
	quiet := s.connect(t, "mcp", "", mcptest.IdleTimeoutClient(1500*time.Millisecond))
	if r, err := quiet.callRaw(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(3)"}); err == nil {
		t.Errorf("a 3s call on a quiet stream survived a 1.5s idle timeout: %v", r)
	}
}

func TestServeSessionTimeout(t *testing.T) {
	s := startServe(t, "--workers", "1", "--session-timeout", "1s")
	c := s.connect(t, "mcp", "", nil)
	wantValue(t, c.run(t, "'hi'"), `"hi"`)
	if n := s.metrics(t)["pyrun_sessions"]; n != 1 {
		t.Errorf("pyrun_sessions = %v, want 1", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.metrics(t)["pyrun_sessions"] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle session was not closed after its 1s timeout")
		}
		<-time.After(50 * time.Millisecond)
	}
	if _, err := c.callRaw(t.Context(), map[string]any{"python_code": "1"}); err == nil {
		t.Error("a call in the expired session succeeded")
	}
	wantValue(t, s.connect(t, "mcp", "", nil).run(t, "2"), "2")
}

func TestServeShutdownLetsRunningCallsFinish(t *testing.T) {
	s := startServe(t, "--workers", "2", "--drain-timeout", "60s")
	s.waitHealth(t, "two ready workers", func(h health) bool { return h.WorkersIdle == 2 })
	viaMCP, viaSSE := s.connect(t, "mcp", "", nil), s.connect(t, "sse", "", nil)
	late := s.connect(t, "mcp", "", nil)
	code := "import time\nprint('started')\ntime.sleep(3)\nprint('done')\n'finished'"
	type outcome struct {
		r   result
		err error
	}
	results := make(chan outcome, 2)
	for _, c := range []*server{viaMCP, viaSSE} {
		go func() {
			r, err := c.call(context.Background(), map[string]any{"python_code": code})
			results <- outcome{r, err}
		}()
	}
	s.waitHealth(t, "both calls running", func(h health) bool { return h.WorkersBusy == 2 })

	mark := s.log.mark()
	signalled := time.Now()
	s.signal(syscall.SIGTERM)
	s.log.waitMsg(t, mark, "waiting for running calls")
	// New calls in an open session are refused; new connections are not taken.
	// Its POST needs a connection: the session's idle one may be closed
	// under it (EOF) or already gone, and then the listener is too. Either
	// way it must not run (counted below).
	if r, err := late.callRaw(t.Context(), map[string]any{"python_code": "1"}); err != nil {
		t.Logf("a call during shutdown: %v", err)
	} else if !r.IsError || !strings.Contains(textOf(r), "shutting down") {
		t.Errorf("a call during shutdown got %q, want a 'shutting down' tool error", textOf(r))
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	if resp, err := hc.Get(s.base + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/healthz during shutdown: %s, want no connection or 503", resp.Status)
		}
	}
	for range 2 {
		o := <-results
		if o.err != nil {
			t.Errorf("a call running at SIGTERM failed: %v", o.err)
			continue
		}
		wantStatus(t, o.r, "success")
		if o.r.sc.Stdout != "started\ndone\n" {
			t.Errorf("stdout %q, want the whole output", o.r.sc.Stdout)
		}
	}
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	elapsed := time.Since(signalled)
	t.Logf("exited %v after SIGTERM", elapsed.Round(time.Millisecond))
	if elapsed > 15*time.Second {
		t.Errorf("took %v to stop after the calls ended", elapsed)
	}
	if _, err := s.log.wait(t.Context(), mark, func(r logRecord) bool { return r.msg() == "stopped" }); err != nil {
		t.Error("no 'stopped' log line")
	}
	ran := 0
	for _, r := range s.log.since(mark) {
		if r.msg() == "call" && r.str("status") != "" && r.str("status") != "rejected" {
			ran++
		}
	}
	if ran != 2 {
		t.Errorf("%d calls ran after SIGTERM, want the 2 that were running", ran)
	}
}

func TestServeDrainIsBounded(t *testing.T) {
	s := startServe(t, "--workers", "1", "--drain-timeout", "1s")
	c := s.connect(t, "sse", "", nil)
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	done := make(chan error, 1)
	go func() {
		r, err := c.callRaw(context.Background(), map[string]any{"python_code": "import time\ntime.sleep(60)"})
		if err == nil && !r.IsError {
			err = errors.New("a call stopped at shutdown reported success")
		} else {
			err = nil
		}
		done <- err
	}()
	s.waitHealth(t, "the call running", func(h health) bool { return h.WorkersBusy == 1 })
	signalled := time.Now()
	s.signal(syscall.SIGTERM)
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	elapsed := time.Since(signalled)
	if elapsed < time.Second || elapsed > 10*time.Second {
		t.Errorf("stopped %v after SIGTERM with a 1s drain time and a 60s call, want 1s to 10s", elapsed)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestServeSecondSignalForcesExit(t *testing.T) {
	s := startServe(t, "--workers", "1")
	c := s.connect(t, "mcp", "", nil)
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	go func() {
		_, _ = c.callRaw(context.Background(), map[string]any{"python_code": "import time\ntime.sleep(60)"})
	}()
	s.waitHealth(t, "the call running", func(h health) bool { return h.WorkersBusy == 1 })
	mark := s.log.mark()
	s.signal(syscall.SIGTERM)
	s.log.waitMsg(t, mark, "waiting for running calls")
	signalled := time.Now()
	s.signal(syscall.SIGINT)
	code := s.wait(30 * time.Second)
	if code == 0 || code == -1 {
		t.Errorf("exit status %d after a second signal, want a non-zero exit", code)
	}
	if elapsed := time.Since(signalled); elapsed > 10*time.Second {
		t.Errorf("took %v to exit after the second signal", elapsed)
	}
}

func TestServeConfigReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pyrun.json")
	// save writes the config as editors do: a new file renamed over the
	// old one, or (inPlace) the old file truncated and rewritten.
	save := func(body string, inPlace bool) {
		t.Helper()
		if inPlace {
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		tmp := filepath.Join(dir, ".pyrun.json.swp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	save(`{"workers": 1, "log_level": "info", "timeout": "30s", "max_output": "64KiB"}`, false)
	// The flag wins over the file's max_output, before and after reloads.
	s := startServe(t, "--config", cfg, "--max-output", "2KiB")
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })

	// Load: two sessions calling without pause through every reload.
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		calls    int
		failures []string
	)
	for range 2 {
		c := s.connect(t, "mcp", "", nil)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := c.call(context.Background(), map[string]any{"python_code": "import time\ntime.sleep(0.2)\nprint('ok')"})
				mu.Lock()
				calls++
				if err != nil {
					failures = append(failures, err.Error())
				} else if r.sc.Status != "success" || r.sc.Stdout != "ok\n" {
					failures = append(failures, r.text)
				}
				mu.Unlock()
			}
		})
	}
	reloaded := func(mark int) logRecord {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		r, err := s.log.wait(ctx, mark, func(r logRecord) bool {
			return r.msg() == "config reloaded" || r.msg() == "config rejected; the settings in force stay"
		})
		if err != nil {
			t.Fatalf("no reload after the config changed: %v", err)
		}
		return r
	}
	changed := func(r logRecord) []string {
		var keys []string
		list, _ := r["changed"].([]any)
		for _, k := range list {
			keys = append(keys, fmt.Sprint(k))
		}
		return keys
	}

	// Grow: 1 -> 3 workers, log level debug.
	mark := s.log.mark()
	save(`{"workers": 3, "log_level": "debug", "timeout": "30s", "max_output": "1MiB"}`, false)
	if r := reloaded(mark); r.msg() != "config reloaded" || !slices.Equal(changed(r), []string{"log-level", "workers"}) {
		t.Errorf("after growing: %v, want changed [log-level workers] (max-output is set by a flag)", r)
	}
	// Ready counts the never-used workers and those the calls' client owns.
	s.waitHealth(t, "three workers up", func(h health) bool { return h.WorkersTotal == 3 && h.WorkersReady >= 3 })

	// Shrink: 3 -> 1, a shorter timeout; written in place this time.
	mark = s.log.mark()
	save(`{"workers": 1, "log_level": "debug", "timeout": "2s", "max_output": "1MiB"}`, true)
	if r := reloaded(mark); r.msg() != "config reloaded" || !slices.Equal(changed(r), []string{"timeout", "workers"}) {
		t.Errorf("after shrinking: %v, want changed [timeout workers]", r)
	}
	// One never-used worker, and at most one the calls' client owns
	// (docs/architecture.md, Workers belong to a client).
	s.waitHealth(t, "one worker left", func(h health) bool {
		return h.WorkersTotal == 1 && h.Languages["python"].WorkersFresh <= 1 && h.WorkersReady+h.WorkersStarting <= 2
	})
	// Retirements are logged at debug: the new log level is in force.
	if _, err := s.log.wait(t.Context(), mark, func(r logRecord) bool {
		return r.msg() == "retiring worker" && r.str("reason") == "the pool shrank"
	}); err != nil {
		t.Error("no debug line for the workers retired by the shrink")
	}
	close(stop)
	wg.Wait()
	if calls < 4 || len(failures) > 0 {
		t.Errorf("%d calls under reloads, failures: %q", calls, failures)
	}

	c := s.connect(t, "mcp", "", nil)
	if r := c.run(t, "import time\ntime.sleep(4)"); r.sc.Status != "timeout" || !strings.Contains(*r.sc.Error, "2s") {
		t.Errorf("a 4s call after the timeout became 2s: status %s, error %v", r.sc.Status, r.sc.Error)
	}
	tools, err := c.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := tools.Tools[0].Description; !strings.Contains(d, "stopped after 2s") {
		t.Errorf("the tool description does not give the new time limit:\n%s", d)
	}
	if r := c.run(t, "print('y' * 5000)"); len(r.sc.Stdout) > 2500 {
		t.Errorf("stdout is %d bytes: the --max-output 2KiB flag lost to the file", len(r.sc.Stdout))
	}

	// Rejected: a file that does not parse, then one that does not check.
	for _, bad := range []string{`{"workers": 3,`, `{"workers": 0}`, `{"wrokers": 3}`} {
		mark = s.log.mark()
		save(bad, false)
		if r := reloaded(mark); r.msg() == "config reloaded" || r.str("@level") != "error" {
			t.Errorf("config %s: %v, want an error and the settings kept", bad, r)
		}
		if h := s.health(t); h.WorkersTotal != 1 {
			t.Errorf("config %s changed the pool: %+v", bad, h)
		}
	}
	wantValue(t, c.run(t, "'still serving'"), `"still serving"`)
}

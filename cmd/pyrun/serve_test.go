package main

// End-to-end tests of `pyrun serve`: the binary built by TestMain, listening
// on a loopback port of its choosing, driven over real HTTP by the go-sdk's
// MCP clients (StreamableClientTransport and SSEClientTransport), by plain
// HTTP for /healthz and /metrics, and by signals.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/logwatch"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

// ---- a pyrun serve process ---------------------------------------------------

// httpServer is a `pyrun serve` child process.
type httpServer struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    *jsonLog
	addr   string // host:port it listens on
	base   string // http://host:port
	exited chan struct{}
	err    error // from Wait; set before exited closes
	// metricsToken is the bearer token metrics sends, when it needs one.
	metricsToken string
}

// startServe starts `pyrun serve` on a free loopback port with JSON logs
// and args, and waits until it listens. At the test's end it is stopped
// with SIGTERM and must exit 0, unless the test already stopped it.
func startServe(t *testing.T, args ...string) *httpServer {
	t.Helper()
	return startServeUnder(t, nil, args...)
}

// startServeUnder is startServe with pyrun run by the command wrapper
// (such as prlimit), which must exec it: s.cmd's PID is pyrun's.
func startServeUnder(t *testing.T, wrapper []string, args ...string) *httpServer {
	t.Helper()
	needBinary(t)
	argv := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	s := &httpServer{t: t, log: newJSONLog(), exited: make(chan struct{})}
	full := append(append(slices.Clone(wrapper), pyrunBin), argv...)
	s.cmd = exec.Command(full[0], full[1:]...)
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			if code := s.wait(90 * time.Second); code != 0 {
				t.Errorf("pyrun serve exited with status %d after SIGTERM, want 0", code)
			}
		}
		if t.Failed() {
			t.Logf("pyrun serve's stderr (last lines):\n%s", s.log.tail(80))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	rec, err := s.log.wait(ctx, 0, func(r logRecord) bool { return r.msg() == "listening" })
	if err != nil {
		t.Fatalf("pyrun %s: %v", strings.Join(argv, " "), err)
	}
	s.addr = rec.str("addr")
	s.base = "http://" + s.addr
	return s
}

// wait waits for the process to exit and returns its exit status; -1 if it
// did not exit in time (it is killed then) or was killed by a signal.
func (s *httpServer) wait(limit time.Duration) int {
	select {
	case <-s.exited:
	case <-time.After(limit):
		s.t.Errorf("pyrun serve did not exit within %v", limit)
		_ = s.cmd.Process.Kill()
		<-s.exited
		return -1
	}
	if s.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(s.err, &ee) && ee.Exited() {
		return ee.ExitCode()
	}
	return -1
}

func (s *httpServer) signal(sig os.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// front is s for mcptest's scenarios.
func (s *httpServer) front() mcptest.Front {
	return mcptest.Front{Base: s.base, Metrics: s.metrics}
}

// sessionRevision is the MCP revision of the sessions the serve and access
// tests open: they test sessions (Mcp-Session-Id, logging/setLevel, drain),
// which 2026-07-28 does without. revisions_test.go tests 2026-07-28.
const sessionRevision = "2025-11-25"

// connect opens an MCP session over Streamable HTTP ("mcp") or HTTP+SSE
// ("sse") at endpoint (the server's own when empty), closed with the test.
func (s *httpServer) connect(t *testing.T, transport, endpoint string, hc *http.Client) *server {
	t.Helper()
	return s.connectWith(t, transport, endpoint, hc, nil)
}

// connectWith is connect with the client's options (notification handlers).
func (s *httpServer) connectWith(t *testing.T, transport, endpoint string, hc *http.Client, opts *sdk.ClientOptions) *server {
	t.Helper()
	if endpoint == "" {
		endpoint = s.base + "/" + transport
	}
	var tr sdk.Transport
	switch transport {
	case "mcp":
		tr = &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}
	case "sse":
		tr = &sdk.SSEClientTransport{Endpoint: endpoint, HTTPClient: hc}
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	// The SSE transport's stream lives in the context Connect is given.
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-serve-e2e", Version: "test"}, opts)
	cs, err := client.Connect(t.Context(), tr, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &server{session: cs}
}

// health is /healthz's answer.
type health struct {
	code            int
	Status          string `json:"status"`
	WorkersReady    int    `json:"workers_ready"`
	WorkersIdle     int    `json:"workers_idle"`
	WorkersBusy     int    `json:"workers_busy"`
	WorkersStarting int    `json:"workers_starting"`
	WorkersTotal    int    `json:"workers_total"`
	Queued          int    `json:"queued"`
	SessionsOpen    int    `json:"sessions_open"`
	Clients         int    `json:"clients"`
	WorkersByClient map[string]struct {
		Idle int `json:"idle"`
		Busy int `json:"busy"`
	} `json:"workers_by_client"`
	Languages map[string]struct {
		WorkersFresh int `json:"workers_fresh"`
	} `json:"languages"`
	OSSandbox struct {
		Mode        string            `json:"mode"`
		Layers      []string          `json:"layers"`
		Missing     map[string]string `json:"missing"`
		LandlockABI int               `json:"landlock_abi"`
	} `json:"os_sandbox"`
}

func (s *httpServer) health(t *testing.T) health {
	t.Helper()
	return s.healthVia(t, http.DefaultClient)
}

// healthVia asks /healthz through hc.
func (s *httpServer) healthVia(t *testing.T, hc *http.Client) health {
	t.Helper()
	resp, err := hc.Get(s.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	h.code = resp.StatusCode
	if (h.code == http.StatusOK) != (h.WorkersReady > 0 && h.Status == "ok") {
		t.Errorf("/healthz answered %d with %+v: want 200 exactly when a worker is ready", h.code, h)
	}
	return h
}

// waitHealth polls /healthz until ok holds.
func (s *httpServer) waitHealth(t *testing.T, what string, ok func(health) bool) health {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		h := s.health(t)
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: /healthz still says %+v", what, h)
		}
		<-time.After(25 * time.Millisecond)
	}
}

// metrics scrapes /metrics into series -> value, series written as in the
// exposition format: name{label="value",...}.
func (s *httpServer) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	return s.metricsVia(t, http.DefaultClient)
}

// metricsVia scrapes /metrics through hc.
func (s *httpServer) metricsVia(t *testing.T, hc *http.Client) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/metrics", nil)
	if s.metricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.metricsToken)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	return mcptest.ParseMetrics(t, resp.Body)
}

// ---- logs --------------------------------------------------------------------

// logRecord is one JSON log line of pyrun.
type logRecord map[string]any

func (r logRecord) msg() string           { return r.str("@message") }
func (r logRecord) str(key string) string { s, _ := r[key].(string); return s }

// jsonLog collects pyrun's stderr (JSON log lines) so that tests can wait
// for a line rather than sleep.
type jsonLog struct {
	*logwatch.Watcher
	recs []logRecord // every line, under the Watcher's lock
}

func newJSONLog() *jsonLog {
	l := &jsonLog{}
	l.Watcher = logwatch.New(0, func(line string) bool {
		var r logRecord
		if json.Unmarshal([]byte(line), &r) != nil {
			r = logRecord{"@message": line}
		}
		l.recs = append(l.recs, r)
		return true
	})
	return l
}

// mark is the number of lines so far: wait(ctx, mark, ...) looks at later lines.
func (l *jsonLog) mark() (n int) {
	l.Locked(func() { n = len(l.recs) })
	return n
}

// wait returns the first line from index from on that matches.
func (l *jsonLog) wait(ctx context.Context, from int, match func(logRecord) bool) (logRecord, error) {
	var found logRecord
	err := l.Wait(ctx, func() bool {
		for ; from < len(l.recs); from++ {
			if match(l.recs[from]) {
				found = l.recs[from]
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no such log line: %w", err)
	}
	return found, nil
}

func (l *jsonLog) waitMsg(t *testing.T, from int, msg string) logRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	r, err := l.wait(ctx, from, func(r logRecord) bool { return r.msg() == msg })
	if err != nil {
		t.Fatalf("waiting for log line %q: %v", msg, err)
	}
	return r
}

// since returns the lines from index from on.
func (l *jsonLog) since(from int) (recs []logRecord) {
	l.Locked(func() { recs = slices.Clone(l.recs[from:]) })
	return recs
}

// tail is the last n lines (n > 0).
func (l *jsonLog) tail(n int) string { return l.Tail(n) }

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

func TestWarmup(t *testing.T) {
	needBinary(t)
	// The package index and PyPI on loopback: warmup asks whether they answer.
	idx := t.TempDir()
	packagestest.Index(t, idx, nil, nil)
	srv, _ := packagestest.Serve(t, idx)
	stdout, stderr, code := pyrunCmd(t, "", "warmup", "--package-index", srv.URL, "--pypi", srv.URL+"/pypi/")
	if code != 0 {
		t.Fatalf("warmup: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, step := range []string{"runtime", "deno", "os sandbox", "pyodide", "snapshot", "packages", "worker", "self-test", "sandbox", "interrupt"} {
		if !regexp.MustCompile(`(?m)^  ` + step + ` +ok +\S`).MatchString(stdout) {
			t.Errorf("warmup did not report step %s as ok:\n%s", step, stdout)
		}
	}
	// The machine pyrun is tested on offers every layer (docs/architecture.md, Facts).
	if !regexp.MustCompile(`os sandbox +ok +auto: rlimits, no_new_privs, landlock \(ABI \d+\), seccomp, netns \[`).MatchString(stdout) {
		t.Errorf("warmup does not name every layer of the OS sandbox:\n%s", stdout)
	}
}

func TestWarmupSaysWhatIsMissing(t *testing.T) {
	needBinary(t)
	// A runtime folder whose pieces are fakes: a Deno that runs or not,
	// Pyodide's metadata with or without its files.
	fakeRuntime := func(t *testing.T, deno string, pyodideFiles bool) string {
		root := t.TempDir()
		dir, err := supervisor.RuntimeDir(root)
		if err != nil {
			t.Fatal(err)
		}
		denoPath := filepath.Join(dir, "node_modules", "@deno", "linux-x64-glibc", "deno")
		pyodide := filepath.Join(dir, "node_modules", "pyodide")
		for _, d := range []string{filepath.Dir(denoPath), pyodide} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		files := map[string]string{
			denoPath: "#!/bin/sh\n" + deno + "\n",
			filepath.Join(pyodide, "pyodide-lock.json"): `{"info": {"python": "3.14.2"}}`,
			filepath.Join(pyodide, "package.json"):      `{"version": "314.0.7"}`,
		}
		if pyodideFiles {
			for _, f := range []string{"pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"} {
				files[filepath.Join(pyodide, f)] = ""
			}
		}
		for p, body := range files {
			if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	noNPM := t.TempDir() // a PATH without npm
	for _, tc := range []struct {
		name, root string
		path       string
		want       []string
	}{
		{"no runtime and no npm", t.TempDir(), noNPM, []string{"runtime    FAIL", "npm is not on PATH"}},
		{"deno does not run", fakeRuntime(t, "echo 'cannot execute binary file' >&2; exit 126", true), "", []string{"deno       FAIL", "does not run"}},
		{"no pyodide files", fakeRuntime(t, "echo 'deno 2.9.6 (stable)'", false), "", []string{"pyodide    FAIL", "pyodide.asm.wasm", "python_stdlib.zip"}},
		{"worker program does not run", fakeRuntime(t, "if [ \"$1\" = --version ]; then echo 'deno 2.9.6 (stable)'; exit 0; fi\necho 'error: Module not found' >&2\nexit 1", true), "", []string{"snapshot   FAIL", "could not be made", "Module not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, pyrunBin, "warmup", "--runtime-dir", tc.root)
			if tc.path != "" {
				cmd.Env = append(os.Environ(), "PATH="+tc.path)
			}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("warmup: %v, want a non-zero exit\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("warmup's output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// textOf is the text of a result's first content block.
func textOf(r *sdk.CallToolResult) string {
	if len(r.Content) == 0 {
		return ""
	}
	if tc, ok := r.Content[0].(*sdk.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprint(r.Content[0])
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/logwatch"
	"github.com/pyrun/pyrun/mcp/mcptest"
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

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/logwatch"
)

// ---- servers ---------------------------------------------------------------

// server is a `pyrun stdio` child with a connected client session.
type server struct {
	session *sdk.ClientSession
	log     *logWatcher
	cmd     *exec.Cmd // the pyrun process (nil: not one the test started)
}

// startServer starts `pyrun stdio` with args and connects to it. Its stderr
// (JSON logs at debug level) goes to a logWatcher.
func startServer(ctx context.Context, args ...string) (*server, error) {
	return startServerWith(ctx, nil, args...)
}

// startServerWith is startServer with a client made with copts.
func startServerWith(ctx context.Context, copts *sdk.ClientOptions, args ...string) (*server, error) {
	return startServerAt(ctx, "", copts, args...)
}

// startServerAt is startServerWith with the client asking for MCP revision
// (the go-sdk's latest, 2026-07-28, when empty).
func startServerAt(ctx context.Context, revision string, copts *sdk.ClientOptions, args ...string) (*server, error) {
	return startServerFor(ctx, 0, revision, copts, args...)
}

// startServerFor is startServerAt with pyrun given up to exit (0: the
// SDK's 5s) after its client hung up, before it is sent SIGTERM.
func startServerFor(ctx context.Context, exit time.Duration, revision string, copts *sdk.ClientOptions, args ...string) (*server, error) {
	lw := newLogWatcher()
	argv := append([]string{"stdio", "--log-format", "json", "--log-level", "debug"}, args...)
	cmd := exec.Command(pyrunBin, argv...)
	cmd.Stderr = lw
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-e2e", Version: "test"}, copts)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: exit}, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		return nil, fmt.Errorf("connect to pyrun %s: %w\n%s", strings.Join(argv, " "), err, lw.tail())
	}
	return &server{session: cs, log: lw, cmd: cmd}, nil
}

// newServer starts a server of the test's own; it stops with the test and
// must exit cleanly.
func newServer(t *testing.T, args ...string) *server {
	t.Helper()
	needBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)
	return s
}

// closeWithTest stops s when t ends: pyrun stdio must exit cleanly once
// its client hangs up, and a failed test shows pyrun's last lines of log.
func (s *server) closeWithTest(t *testing.T) {
	t.Cleanup(func() {
		if err := s.session.Close(); err != nil {
			t.Errorf("pyrun stdio did not exit cleanly after the client hung up: %v", err)
		}
		if t.Failed() {
			t.Logf("pyrun's stderr (last lines):\n%s", s.log.tail())
		}
	})
}

// shared is the two-worker server most tests use. It starts on first use and
// stops in TestMain.
var shared sharedServer

type sharedServer struct {
	once sync.Once
	srv  *server
	err  error
}

func (s *sharedServer) get(t *testing.T) *server {
	t.Helper()
	needBinary(t)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		s.srv, s.err = startServer(ctx, "--workers", "2")
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	srv := s.srv
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shared pyrun's stderr (last lines):\n%s", srv.log.tail())
		}
	})
	return srv
}

func (s *sharedServer) close() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.session.Close()
}

// logWatcher takes pyrun's stderr (JSON log lines), keeps the last lines for
// failure messages and counts lines by message (worker starts and
// retirements, cancelled calls), so that a test can wait for the pool to be
// whole, or for a call to be cancelled, without sleeping.
type logWatcher struct {
	*logwatch.Watcher
	counts map[string]int // lines by @message, under the Watcher's lock
}

func newLogWatcher() *logWatcher {
	w := &logWatcher{counts: map[string]int{}}
	w.Watcher = logwatch.New(60, func(line string) bool {
		var rec struct {
			Message string `json:"@message"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			return false
		}
		w.counts[rec.Message]++
		return true
	})
	return w
}

// tail is the last lines pyrun logged.
func (w *logWatcher) tail() string { return w.Tail(0) }

// count is how many lines with message pyrun has logged so far.
func (w *logWatcher) count(message string) (n int) {
	w.Locked(func() { n = w.counts[message] })
	return n
}

// waitFor waits until cond, given the counts of lines by message, holds.
func (w *logWatcher) waitFor(ctx context.Context, what string, cond func(counts map[string]int) bool) error {
	if err := w.Wait(ctx, func() bool { return cond(w.counts) }); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// waitWorkers waits until at least n workers are ready and not retired.
func (w *logWatcher) waitWorkers(ctx context.Context, n int) error {
	return w.waitFor(ctx, fmt.Sprintf("%d ready workers", n), func(c map[string]int) bool {
		return c["worker ready"]-c["retiring worker"] >= n
	})
}

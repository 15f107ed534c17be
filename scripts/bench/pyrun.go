//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/logwatch"
	"github.com/pyrun/pyrun/internal/procfs"
)

// pyrunProc is a `pyrun stdio` child with a connected MCP client session.
type pyrunProc struct {
	cmd     *exec.Cmd
	session *sdk.ClientSession
	log     *logWatcher
	started time.Time // just before the process was started
}

// sessionRevision is the MCP revision of the benchmark's sessions, the one
// its figures were first measured at; the HTTP tier "2026-07-28" measures
// the newest (the go-sdk client's default).
const sessionRevision = "2025-11-25"

// startPyrun starts `pyrun stdio` with args and connects to it. Its
// stderr, JSON logs at logLevel, goes to a logWatcher, which sees workers
// start and retire at the debug level.
func startPyrun(ctx context.Context, o *opts, logLevel string, args ...string) (*pyrunProc, error) {
	// --attach never: a pyrun service of the user's (docs/contract.md section 16)
	// must not stand in for the pyrun measured; the local tier asks for
	// it with a later --attach.
	argv := append([]string{"stdio", "--attach", "never", "--log-format", "json", "--log-level", logLevel, "--runtime-dir", o.runtimeDir}, args...)
	cmd := exec.Command(o.bin, argv...)
	lw := newLogWatcher()
	cmd.Stderr = lw
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	started := time.Now()
	session, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	if err != nil {
		return nil, fmt.Errorf("start pyrun %s: %w\n%s", strings.Join(argv, " "), err, lw.tail())
	}
	return &pyrunProc{cmd: cmd, session: session, log: lw, started: started}, nil
}

func (p *pyrunProc) close() { _ = p.session.Close() }

// startTwoWorkers starts pyrun stdio on a pool of two workers, logging at
// debug level (the tiers read its worker lines), and waits until both are
// alive.
func startTwoWorkers(ctx context.Context, o *opts, args ...string) (*pyrunProc, error) {
	p, err := startPyrun(ctx, o, "debug", append([]string{"--workers", "2"}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := p.log.waitAlive(ctx, 2); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// call runs code through run_python_code and checks that it succeeded.
func (p *pyrunProc) call(ctx context.Context, code string, globals map[string]any) (*sdk.CallToolResult, error) {
	args := map[string]any{"python_code": code}
	if globals != nil {
		args["global_variables"] = globals
	}
	res, err := p.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%w\npyrun's stderr:\n%s", err, p.log.tail())
	}
	if res.IsError {
		return res, fmt.Errorf("tool error: %s", contentText(res))
	}
	return res, nil
}

func contentText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// workers lists the pids of pyrun's worker processes.
func (p *pyrunProc) workers() []int {
	return procfs.Children(p.cmd.Process.Pid)
}

// logWatcher reads pyrun's stderr (JSON log lines), keeps the last lines
// for error messages, and records when workers became ready and retired,
// with pyrun's own timestamps. What it records is read under its
// Watcher's lock (Locked, Wait).
type logWatcher struct {
	*logwatch.Watcher
	ready []time.Time // "worker ready"
	// inWorker is each ready worker's in_worker_ms: its start inside the
	// worker program, from its first line of code to its ready.
	inWorker []float64
	retired  []time.Time // "retiring worker"
	// dedicated counts session workers ready ("dedicated worker ready").
	dedicated int
	addr      string // where pyrun serve listens ("listening")
}

func newLogWatcher() *logWatcher {
	w := &logWatcher{}
	w.Watcher = logwatch.New(40, w.observe)
	return w
}

// observe records a line of pyrun's log; it runs under the Watcher's lock.
func (w *logWatcher) observe(line string) bool {
	var rec struct {
		Message   string  `json:"@message"`
		Timestamp string  `json:"@timestamp"`
		Addr      string  `json:"addr"`
		InWorker  float64 `json:"in_worker_ms"`
	}
	if json.Unmarshal([]byte(line), &rec) != nil {
		return false
	}
	at, err := time.Parse("2006-01-02T15:04:05.999999Z07:00", rec.Timestamp)
	if err != nil {
		return false
	}
	switch rec.Message {
	case "worker ready":
		w.ready = append(w.ready, at)
		w.inWorker = append(w.inWorker, rec.InWorker)
	case "retiring worker":
		w.retired = append(w.retired, at)
	case "dedicated worker ready":
		w.dedicated++
	case "listening":
		w.addr = rec.Addr
	default:
		return false
	}
	return true
}

// waitDedicated waits until n session workers have become ready.
func (w *logWatcher) waitDedicated(ctx context.Context, n int) error {
	var got int
	if err := w.Wait(ctx, func() bool { got = w.dedicated; return got >= n }); err != nil {
		return fmt.Errorf("waiting for %d session workers ready (%d so far): %w", n, got, err)
	}
	return nil
}

func (w *logWatcher) tail() string { return w.Tail(0) }

// waitFor waits until cond, called with the ready and retired times so
// far, holds.
func (w *logWatcher) waitFor(ctx context.Context, what string, cond func(ready, retired []time.Time) bool) error {
	if err := w.Wait(ctx, func() bool { return cond(w.ready, w.retired) }); err != nil {
		return fmt.Errorf("waiting for %s: %w\npyrun's stderr:\n%s", what, err, w.tail())
	}
	return nil
}

// waitAlive waits until n workers are ready and not retired.
func (w *logWatcher) waitAlive(ctx context.Context, n int) error {
	return w.waitFor(ctx, fmt.Sprintf("%d ready workers", n), func(ready, retired []time.Time) bool {
		return len(ready)-len(retired) >= n
	})
}

// startServe starts `pyrun serve` on a loopback port of its choosing with
// args and connects to it over transport: "stateful" and "stateless" are
// Streamable HTTP at /mcp at 2025-11-25 (the latter with --stateless),
// "2026-07-28" is /mcp at that revision (no session), "sse" is HTTP+SSE at
// /sse.
func startServe(ctx context.Context, o *opts, transport string, args ...string) (*pyrunProc, func(), error) {
	argv := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--runtime-dir", o.runtimeDir}, args...)
	if transport == "stateless" {
		argv = append(argv, "--stateless")
	}
	cmd := exec.Command(o.bin, argv...)
	lw := newLogWatcher()
	cmd.Stderr = lw
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	var addr string
	err := lw.waitFor(ctx, "pyrun serve to listen", func(_, _ []time.Time) bool {
		addr = lw.addr
		return addr != ""
	})
	if err != nil {
		stop()
		return nil, nil, err
	}
	var tr sdk.Transport
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	switch transport {
	case "stateful", "stateless", "2026-07-28":
		tr = &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}
	case "sse":
		tr = &sdk.SSEClientTransport{Endpoint: "http://" + addr + "/sse", HTTPClient: hc}
	default:
		stop()
		return nil, nil, fmt.Errorf("unknown transport %q", transport)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	revision := sessionRevision
	if transport == "2026-07-28" {
		revision = ""
	}
	session, err := client.Connect(ctx, tr, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("connect over %s: %w\n%s", transport, err, lw.tail())
	}
	p := &pyrunProc{cmd: cmd, session: session, log: lw}
	return p, func() { _ = session.Close(); stop() }, nil
}

// memory reads a process's resident and proportional set sizes, in bytes.
func memory(pid int) (rss, pss int64, err error) {
	rss, err = procfs.Status(pid, "VmRSS")
	if err != nil {
		return 0, 0, err
	}
	pss, err = procfs.Size(procfs.Path(pid, "smaps_rollup"), "Pss")
	return rss, pss, err
}

// cpuTime is the CPU time a process has used so far, all its threads.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// After the command: state ppid ... utime (field 14) stime (15), in
	// clock ticks of 10 ms.
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// kill sends SIGKILL to pid.
func kill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

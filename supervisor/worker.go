package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// Job is one call to run.
type Job struct {
	// ID names the call in logs and in the worker protocol.
	ID   string
	Code string
	// Language is the engine the call is for (Engine.Name), for Pools;
	// "": Python.
	Language string
	// Globals is a JSON object of names to bind in the call's globals; empty
	// for none. The front end has checked that it is an object.
	Globals json.RawMessage
	// Timeout is the call's own limit; 0 or more than the pool's Timeout
	// means the pool's.
	Timeout time.Duration
	// Client names who asked (a token's name, a JWT's subject), and
	// Session the MCP session it came in, for logs.
	Client  string
	Session string
	// PythonSession is the id of the Python session the call runs in, for
	// logs; empty for a stateless call.
	PythonSession string
	// Files are written into the working directory before the code runs;
	// the front end has checked their paths (CheckInputPath). nil: none.
	Files []InputFile
	// KeepOutput leaves /output/ as the worker's previous call left it,
	// for a session; false empties it before and after the call.
	KeepOutput bool
	// Tools runs the host calls the code makes (tool_call events); nil:
	// it can make none. Catalog describes them to the code, as JSON the
	// supervisor passes on unread; empty: none.
	Tools   ToolCaller
	Catalog json.RawMessage
}

// Stop delays: a worker told to stop first sees its stdin close, then
// SIGTERM, then SIGKILL.
const (
	stopEOFDelay  = 1 * time.Second
	stopTermDelay = 1 * time.Second
)

// maxEventLine bounds a line from a worker: the largest legitimate line is a
// result carrying a capped return value and traceback, each at most
// MaxOutput characters, JSON-escaped.
// A display or file event carries at most 1 MiB in base64 (larger ones
// are split over several events).
func maxEventLine(cfg Config) int { return max(16*cfg.MaxOutput, 1<<20) + 1<<20 }

// worker owns one Deno child process: its command, pipes and goroutines.
// It runs one call at a time (the pool sees to that); close may be called
// from any goroutine, any number of times.
type worker struct {
	name  string
	log   hclog.Logger
	cmd   *exec.Cmd
	stdin *os.File

	events chan event // from readEvents; closed when stdout ends or breaks
	// richQueued holds a token for each display or file event in events:
	// readEvents queues at most richQueue of them (each up to a MiB of
	// data), however fast a worker writes them; the call that takes one
	// gives its token back (tookRich).
	richQueued chan struct{}
	killed     chan struct{} // closed by kill
	readErr    error         // why events closed; written before the close
	exited     chan struct{} // closed once the process has been reaped
	waitErr    error         // from cmd.Wait; written before exited closes
	stderr     *tailBuffer

	ready event // the worker's ready announcement
	gen   int   // the pool configuration generation it was started with
	// pkgs resolves what the worker's calls import; nil: no packages.
	pkgs *packages.Resolver

	idleSince time.Time // when it last became idle; guarded by the pool's mu
	warmSent  int       // warming calls it was let run; guarded by the pool's mu
	// freshRSS: resident bytes when it became ready, raised by the health
	// check while it has had no call; 0: unknown.
	freshRSS atomic.Int64
	statm    statmFile // its /proc/<pid>/statm, opened on first use
	readyAt  time.Time // when it became ready
	// settled: the health check has seen it idle and quiet once, so its
	// engine's start-up work is over (health.go). Only the health check's
	// goroutine touches it.
	settled bool

	mu         sync.Mutex
	killReason retirement // why the supervisor killed it; guarded by mu

	closeOnce sync.Once
	// started counts the calls begun, for the stderr relogger's per-call limit.
	started atomic.Int64

	// Owned by the goroutine running a call (the pool hands a worker to one
	// caller at a time).
	interrupts  int        // SIGUSR2 signals sent so far
	calls       int        // calls run
	retire      retirement // given: do not reuse, and why
	undelivered bool       // the last call never reached the worker: it died first
	// unsettled: the call whose result came but whose "idle" has not
	// (worker.settle); "": none.
	unsettled string
	// elsewhere: the last call's code did not run because it pinned another
	// version of a package this worker had loaded; it goes to a fresh worker.
	elsewhere bool
}

// startWorker starts cmd as a worker and waits until it is ready or fails.
// exited, if not nil, is called once the process has ended, whenever that
// is: the pool replaces an idle worker that something outside killed.
// check, if not nil, runs while the process starts; if it fails, so does
// the start (the pool checks a snapshot's bytes this way).
// logs bounds what of its stderr reaches pyrun's log; nil: a budget of its own.
func startWorker(ctx context.Context, name string, cmd *exec.Cmd, cfg Config, log hclog.Logger, logs *stderrBudget, exited func(), check func() error) (*worker, error) {
	if logs == nil {
		logs = newStderrBudget(cfg.withDefaults())
	}
	w := &worker{
		name:   name,
		log:    log,
		cmd:    cmd,
		events: make(chan event, 64),

		richQueued: make(chan struct{}, richQueue),
		killed:     make(chan struct{}),
		exited:     make(chan struct{}),
		stderr:     &tailBuffer{max: 4 << 10},
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("start worker: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, stdoutR, stdoutW} {
			f.Close()
		}
		return nil, fmt.Errorf("start worker: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	setProcAttr(cmd)
	err = cmd.Start()
	// The child has its own copies; ours would keep the pipes open forever.
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		return nil, fmt.Errorf("start worker: %w", err)
	}
	w.stdin = stdinW
	w.log = log.With("pid", cmd.Process.Pid)

	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() {
		defer pipes.Done()
		w.readEvents(stdoutR, maxEventLine(cfg))
	}()
	go func() {
		defer pipes.Done()
		w.relogStderr(stderrR, logs)
	}()
	go func() {
		// Every pipe is read to its end before Wait, so the child never
		// blocks on a full pipe and no output is lost.
		pipes.Wait()
		w.waitErr = cmd.Wait()
		w.statm.close()
		close(w.exited)
		if exited != nil {
			exited()
		}
	}()

	if check != nil {
		if err := check(); err != nil {
			w.kill(retirement{restartStopped, "its start was called off"})
			return nil, err
		}
	}
	if err := w.awaitReady(ctx, cfg.StartTimeout); err != nil {
		w.kill(retirement{RestartCrash, "start failed"})
		return nil, err
	}
	return w, nil
}

func (w *worker) awaitReady(ctx context.Context, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case ev, ok := <-w.events:
		if !ok {
			<-w.exited
			err := fmt.Errorf("worker exited before it was ready (%s)%s", w.exitDescription(), w.stderrSuffix())
			if !w.killedFor().given() && w.signaled() == syscall.SIGKILL {
				err = fmt.Errorf("%w: %w", errKilledStarting, err)
			}
			return err
		}
		if ev.Type != "ready" {
			return fmt.Errorf("worker said %q before it was ready%s", ev.Type, w.stderrSuffix())
		}
		if ev.Protocol != protocolVersion {
			return fmt.Errorf("worker speaks protocol %d, pyrun speaks %d", ev.Protocol, protocolVersion)
		}
		w.ready = ev
		return nil
	case <-timer.C:
		return fmt.Errorf("worker not ready after %s%s", limit, w.stderrSuffix())
	case <-ctx.Done():
		return fmt.Errorf("start worker: %w", ctx.Err())
	}
}

func (w *worker) readEvents(r io.ReadCloser, max int) {
	defer r.Close()
	defer close(w.events)
	er := newEventReader(r, max)
	for {
		ev, err := er.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				w.readErr = err
				// A worker that speaks garbage is retired, not trusted;
				// drain what it still writes so it never blocks.
				w.kill(retireProtocol)
				_, _ = io.Copy(io.Discard, r)
			}
			return
		}
		if ev.Type == "display" || ev.Type == "file" {
			select {
			case w.richQueued <- struct{}{}:
			case <-w.killed:
				continue // nobody takes it: read on to the end
			}
		}
		w.events <- ev
	}
}

// richQueue bounds the display and file events waiting for their call to
// take them, per worker: at most richQueue MiB of data decoded and held.
const richQueue = 4

// tookRich gives back the token of a display or file event the call took.
func (w *worker) tookRich() {
	select {
	case <-w.richQueued:
	default:
	}
}

func (w *worker) relogStderr(r io.ReadCloser, logs *stderrBudget) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	lim := &stderrLimiter{pool: logs}
	for sc.Scan() {
		line := escapeLine(sc.Text(), stderrLineMax)
		w.stderr.add(line)
		ok, report := lim.allow(line, w.started.Load(), time.Now())
		if report != "" {
			w.log.Warn(report)
		}
		if ok {
			w.log.Info(line)
		}
	}
	if report := lim.flush(); report != "" {
		w.log.Warn(report)
	}
	// A line too long for the scanner: keep draining so the child never blocks.
	_, _ = io.Copy(io.Discard, r)
}

// kill stops the process at once; safe from any goroutine. The first reason
// given is kept.
func (w *worker) kill(r retirement) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killReason.given() {
		return
	}
	w.killReason = r
	close(w.killed)
	_ = w.cmd.Process.Kill()
}

// killedFor says why the supervisor killed the worker; nothing if it did not.
func (w *worker) killedFor() retirement {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killReason
}

// usable reports whether the worker may take another call.
func (w *worker) usable() bool {
	if w.retire.given() || w.killedFor().given() {
		return false
	}
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// close stops the worker in steps: stdin closed, SIGTERM, SIGKILL. It
// returns once the process is reaped and its pipes are drained.
func (w *worker) close() {
	w.closeOnce.Do(func() {
		w.stdin.Close()
		select {
		case <-w.exited:
			return
		case <-time.After(stopEOFDelay):
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
			return
		case <-time.After(stopTermDelay):
		}
		w.kill(retirement{restartStopped, "it did not stop"})
	})
	<-w.exited
}

// errKilledStarting marks a start that ended because something outside
// pyrun killed the process (SIGKILL: an administrator, the kernel's OOM
// killer). Unlike a worker that exits or aborts on its own, it says nothing
// about whether workers can start.
var errKilledStarting = errors.New("killed while starting")

// signaled is the signal that ended the process, or 0; call it after exited
// closes.
func (w *worker) signaled() syscall.Signal {
	var ee *exec.ExitError
	if errors.As(w.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

func (w *worker) exitDescription() string {
	if w.waitErr == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(w.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	return w.waitErr.Error()
}

func (w *worker) stderrSuffix() string {
	if t := w.stderr.String(); t != "" {
		return "; its last words on stderr:\n" + t
	}
	return ""
}

// tailBuffer keeps the last max bytes of a worker's stderr lines, for the
// error when it dies.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
	size  int
}

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(line) > t.max {
		line = line[len(line)-t.max:]
	}
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for t.size > t.max {
		t.size -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

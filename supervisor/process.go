package supervisor

import (
	"bufio"
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
)

// Stop delays: a process told to stop first sees its stdin close, then
// SIGTERM, then SIGKILL.
const (
	stopEOFDelay  = 1 * time.Second
	stopTermDelay = 1 * time.Second
)

// process owns one Deno child, as go-plugin's Runner does: its command,
// its stdin, the goroutines that read its stdout and stderr, and its
// reaping. It knows nothing of the protocol its pipes carry: stdout goes
// to the reader it was started with (conn.readEvents), stderr is re-logged
// under its name. kill and close may be called from any goroutine, any
// number of times.
type process struct {
	name  string
	log   hclog.Logger
	cmd   *exec.Cmd
	stdin *os.File

	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // from cmd.Wait; written before exited closes
	killed  chan struct{} // closed by kill
	stderr  *tailBuffer   // its last stderr lines, for the error when it dies
	statm   statmFile     // its /proc/<pid>/statm, opened on first use

	// callsBegun counts the calls begun on it (conn.run), for the stderr
	// relogger's per-call limit and for what the pool knows of a worker
	// that has had no call yet.
	callsBegun atomic.Int64

	mu         sync.Mutex
	killReason retirement // why the supervisor killed it; guarded by mu

	closeOnce sync.Once
}

// startProcess starts cmd with pipes of its own. readStdout reads its
// stdout on a goroutine of the process's until the pipe ends, and its
// stderr is re-logged within logs. exited, if not nil, is called once the
// process has ended and been reaped, whenever and however that is.
func startProcess(name string, cmd *exec.Cmd, log hclog.Logger, logs *stderrBudget,
	readStdout func(p *process, r io.ReadCloser), exited func()) (*process, error) {
	p := &process{
		name:   name,
		log:    log,
		cmd:    cmd,
		exited: make(chan struct{}),
		killed: make(chan struct{}),
		stderr: &tailBuffer{max: 4 << 10},
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return nil, fmt.Errorf("start worker: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		return nil, fmt.Errorf("start worker: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	setProcAttr(cmd)
	err = cmd.Start()
	// The child has its own copies; ours would keep the pipes open forever.
	closeAll(stdinR, stdoutW, stderrW)
	if err != nil {
		closeAll(stdinW, stdoutR, stderrR)
		return nil, fmt.Errorf("start worker: %w", err)
	}
	p.stdin = stdinW
	p.log = log.With("pid", cmd.Process.Pid)

	var pipes sync.WaitGroup
	pipes.Go(func() { readStdout(p, stdoutR) })
	pipes.Go(func() { p.relogStderr(stderrR, logs) })
	go func() {
		// Every pipe is read to its end before Wait, so the child never
		// blocks on a full pipe and no output is lost.
		pipes.Wait()
		p.waitErr = cmd.Wait()
		p.statm.close()
		close(p.exited)
		if exited != nil {
			exited()
		}
	}()
	return p, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (p *process) relogStderr(r io.ReadCloser, logs *stderrBudget) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	lim := &stderrLimiter{pool: logs}
	for sc.Scan() {
		line := escapeLine(sc.Text(), stderrLineMax)
		p.stderr.add(line)
		ok, report := lim.allow(line, p.callsBegun.Load(), time.Now())
		if report != "" {
			p.log.Warn(report)
		}
		if ok {
			p.log.Info(line)
		}
	}
	if report := lim.flush(); report != "" {
		p.log.Warn(report)
	}
	// A line too long for the scanner: keep draining so the child never blocks.
	_, _ = io.Copy(io.Discard, r)
}

// pid is the process's id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// residentBytes is the process's resident set size.
func (p *process) residentBytes() (int64, error) { return p.statm.resident(p.pid()) }

// kill stops the process at once; safe from any goroutine. The first reason
// given is kept.
func (p *process) kill(r retirement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killReason.given() {
		return
	}
	p.killReason = r
	close(p.killed)
	_ = p.cmd.Process.Kill()
}

// killedFor says why the supervisor killed the process; nothing if it did not.
func (p *process) killedFor() retirement {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killReason
}

// gone reports whether the process has been reaped.
func (p *process) gone() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// close stops the process in steps: stdin closed, SIGTERM, SIGKILL. It
// returns once the process is reaped and its pipes are drained.
func (p *process) close() {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		select {
		case <-p.exited:
			return
		case <-time.After(stopEOFDelay):
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(stopTermDelay):
		}
		p.kill(retirement{restartStopped, "it did not stop"})
	})
	<-p.exited
}

// errKilledStarting marks a start that ended because something outside
// pyrun killed the process (SIGKILL: an administrator, the kernel's OOM
// killer). Unlike a worker that exits or aborts on its own, it says nothing
// about whether workers can start.
var errKilledStarting = errors.New("killed while starting")

// signaled is the signal that ended the process, or 0; call it after exited
// closes.
func (p *process) signaled() syscall.Signal {
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

func (p *process) exitDescription() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	if sig := p.signaled(); sig != 0 {
		return "killed by " + sig.String()
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	return p.waitErr.Error()
}

func (p *process) stderrSuffix() string {
	if t := p.stderr.String(); t != "" {
		return "; its last words on stderr:\n" + t
	}
	return ""
}

// tailBuffer keeps the last max bytes of a process's stderr lines, for the
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

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

	events  chan event    // from readEvents; closed when stdout ends or breaks
	readErr error         // why events closed; written before the close
	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // from cmd.Wait; written before exited closes
	stderr  *tailBuffer

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
	killReason string // why the supervisor killed it; guarded by mu

	closeOnce sync.Once
	// started counts the calls begun, for the stderr relogger's per-call limit.
	started atomic.Int64

	// Owned by the goroutine running a call (the pool hands a worker to one
	// caller at a time).
	interrupts  int    // SIGUSR2 signals sent so far
	calls       int    // calls run
	retire      string // non-empty: do not reuse, and why
	undelivered bool   // the last call never reached the worker: it died first
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
		exited: make(chan struct{}),
		stderr: &tailBuffer{max: 4 << 10},
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
			w.kill("its start was called off")
			return nil, err
		}
	}
	if err := w.awaitReady(ctx, cfg.StartTimeout); err != nil {
		w.kill("start failed")
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
			if w.killedFor() == "" && w.signaled() == syscall.SIGKILL {
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
				w.kill("it broke the protocol")
				_, _ = io.Copy(io.Discard, r)
			}
			return
		}
		w.events <- ev
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

// warmRequest lets a fresh worker run n of its warming calls now (PROTOCOL.md,
// Warming calls).
type warmRequest struct {
	Type  string `json:"type"`
	Calls int    `json:"calls"`
}

// warm lets a worker that has had no call run n of its warming calls. A
// worker that does not take the line is killed: the health check or the
// next call finds it gone. A call's request written at the same time comes
// whole before or after it: writes to one os.File are serialised.
func (w *worker) warm(n int) {
	line, _ := json.Marshal(warmRequest{Type: "warm", Calls: n})
	_ = w.stdin.SetWriteDeadline(time.Now().Add(answerWriteLimit))
	if _, err := w.stdin.Write(append(line, '\n')); err != nil {
		w.kill("it did not accept a request")
	}
}

// run sends job to the worker and collects its result.
func (w *worker) run(ctx context.Context, job Job, cfg Config, tr *transcript) (res Result) {
	w.calls++
	w.started.Add(1)
	res = Result{ID: job.ID, Worker: w.name}
	started := time.Now()
	defer func() { res.Duration = time.Since(started) }()

	limit := callLimit(cfg, job)
	line, err := json.Marshal(request{
		Type: "run", ID: job.ID, Code: &job.Code, Globals: string(job.Globals),
		MaxOutput: cfg.MaxOutput, Interrupts: w.interrupts, Tools: string(job.Catalog),
		richRequest: newRichRequest(job, cfg),
	})
	if err != nil {
		res.Status, res.Error = StatusCrashed, fmt.Sprintf("pyrun could not encode the call: %v", err)
		return res
	}
	line = append(line, '\n')
	// The worker is idle and reading; a deadline still guards against one
	// that is not. A short call limit must not cut the write of long code.
	_ = w.stdin.SetWriteDeadline(time.Now().Add(max(limit, answerWriteLimit)))
	if _, err := w.stdin.Write(line); err != nil {
		w.kill("it did not accept a call")
		// The line's final newline never reached the worker: no code ran.
		w.undelivered = true
		return w.died(res, tr, "", fmt.Errorf("worker did not accept the call: %w", err))
	}

	// A need is resolved on its own goroutine, so that the deadline and
	// cancellation stay in force; its answer comes back on answers.
	answers := make(chan answer, 1)
	needing := false
	cutByStop := false // the answer said no because the call was stopped
	conflict := false  // the answer said no: another version is loaded here
	resolveCtx, cancelResolve := context.WithCancel(ctx)
	defer func() {
		cancelResolve()
		if needing {
			<-answers
			// The worker still waits for the answer, or its next read
			// would take the next call's line for it.
			w.retire = "it was stopped while its packages were being fetched"
		}
	}()
	// Host calls run on goroutines of their own; the worker waits for an
	// answer to each, also when the call ends first.
	tools := newToolCalls(ctx, job)
	defer func() {
		if err := tools.finish(w.writeAnswer); err != nil && w.retire == "" {
			w.retire = "it did not take the answer to a tool call"
		}
	}()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var grace, repeat <-chan time.Time // while stopping: kill at grace, interrupt again at repeat
	var stopped string                 // why the supervisor stopped the call, if it did
	var ticker *time.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	stop := func(why string) {
		if stopped != "" {
			return
		}
		stopped = why
		cancelResolve() // a fetch in progress is for nothing now
		tools.stop()
		w.interrupt()
		grace = time.After(cfg.InterruptGrace)
		ticker = time.NewTicker(interruptRepeat)
		repeat = ticker.C
	}
	var broken error // how the worker failed the call, if it did
	fail := func(err error, reason string) {
		if broken == nil {
			broken = err
		}
		w.kill(reason)
	}
	done := ctx.Done()
	heard := false // the worker said something about this call
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				res = w.died(res, tr, stopped, broken)
				w.undelivered = !heard && stopped == "" && w.neverRead(len(line))
				return res
			}
			if ev.ID != job.ID {
				fail(fmt.Errorf("%w: event %q for call %q during call %q", errGarbage, ev.Type, ev.ID, job.ID), "it broke the protocol")
				continue
			}
			heard = true
			switch ev.Type {
			case "output":
				tr.add(Stream(ev.Stream), ev.Text)
			case "package":
				if tr.events != nil {
					tr.events.Package(ev.Text)
				}
			case "need":
				if needing {
					fail(fmt.Errorf("%w: a second need before the first was answered", errGarbage), "it broke the protocol")
					continue
				}
				needing = true
				if tr.events != nil {
					tr.events.Package(needText(ev))
				}
				go func() { answers <- w.resolve(resolveCtx, job.ID, ev) }()
			case "tool_call":
				if refused := tools.start(job.ID, ev); refused != nil {
					if err := w.writeAnswer(*refused); err != nil {
						fail(fmt.Errorf("the worker did not take the answer to a tool call: %w", err), "it did not take a tool call's answer")
					}
				}
			case "error":
				fail(fmt.Errorf("the worker failed the call: %s", ev.Error), "it failed a call")
			case "display", "file":
				if err := tr.rich.add(ev, cfg); err != nil {
					fail(err, "it broke the protocol")
				}
			case "result":
				if cutByStop && ev.Status == "install-error" {
					ev.Status = "interrupted" // its packages were cut short by the stop
				}
				// A worker that ran calls before this one may have loaded
				// what a fresh worker would not have: the call goes to one.
				// On a fresh worker (preloaded deps) the conflict stands.
				w.elsewhere = conflict && ev.Status == "install-error" && stopped == "" && w.calls > 1
				if w.ready.Settles {
					w.unsettled = job.ID
				}
				return w.finish(res, ev, tr, stopped, cfg)
			default:
				fail(fmt.Errorf("%w: %q during a call", errGarbage, ev.Type), "it broke the protocol")
			}
		case ans := <-answers:
			needing = false
			if ans.retire != "" {
				w.retire = ans.retire
			}
			if tr.events != nil {
				tr.events.Package(answerText(ans.req))
			}
			cutByStop = stopped != "" && ans.req.Error != ""
			conflict = ans.conflict
			b, err := json.Marshal(ans.req)
			if err == nil {
				// The worker waits for this line; the call's own write
				// deadline may have passed while the packages came.
				_ = w.stdin.SetWriteDeadline(time.Now().Add(answerWriteLimit))
				_, err = w.stdin.Write(append(b, '\n'))
			}
			if err != nil {
				fail(fmt.Errorf("the worker did not take its packages: %w", err), "it did not take its packages")
			}
		case ans := <-tools.answers:
			tools.took()
			if stopped != "" {
				tools.hold(ans)
				continue
			}
			if err := w.writeAnswer(ans); err != nil {
				fail(fmt.Errorf("the worker did not take the answer to a tool call: %w", err), "it did not take a tool call's answer")
			}
		case <-deadline.C:
			if stopped == "" {
				tr.notice(false, "the call reached its time limit of %s; interrupting it", limit)
			}
			stop(fmt.Sprintf("the call exceeded its time limit of %s", limit))
		case <-done:
			done = nil
			stop("the call was cancelled")
		case <-repeat:
			w.interrupt()
		case <-grace:
			grace, repeat = nil, nil
			tr.notice(true, "the call did not stop within %s of the interrupt; its worker is killed and replaced", cfg.InterruptGrace)
			w.kill("it did not stop after an interrupt")
		}
	}
}

// settle waits for the worker to say "idle" after its last call's result:
// it cleans up after a call (fresh globals, files and modules for the
// next) once the result is out, so that the caller does not wait for
// that, and reads no request before it is done. Clean-up can run the
// call's own code (finalizers), so it gets no longer than a call, and a
// worker that takes longer, or says anything else, is killed: the next
// call goes to another worker, not charged for this one's leftovers.
func (w *worker) settle(limit time.Duration) error {
	id := w.unsettled
	w.unsettled = ""
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case ev, ok := <-w.events:
		switch {
		case !ok:
			return errors.New("the worker exited while it cleaned up after a call")
		case ev.Type == "idle" && ev.ID == id:
			return nil
		}
		w.kill("it broke the protocol")
		return fmt.Errorf("%w: %q for call %q while it cleaned up after call %q", errGarbage, ev.Type, ev.ID, id)
	case <-timer.C:
		w.kill(retireSettle)
		return fmt.Errorf("the worker did not clean up after call %s within %s", id, limit)
	}
}

// retireSettle is why a worker is killed whose clean-up after a call
// outlasted a call's time limit.
const retireSettle = "it did not clean up after a call in time"

// retireVersionConflict is why a worker is retired after a call that
// needed another version of a package it has loaded.
const retireVersionConflict = "a call needed another version of a package it has loaded"

// writeAnswer writes an answer the worker is waiting for (tool_result).
func (w *worker) writeAnswer(ans request) error {
	if w.killedFor() != "" {
		return errors.New("the worker was killed")
	}
	b, err := json.Marshal(ans)
	if err != nil {
		return err
	}
	_ = w.stdin.SetWriteDeadline(time.Now().Add(answerWriteLimit))
	_, err = w.stdin.Write(append(b, '\n'))
	return err
}

// answerWriteLimit bounds the write of a packages answer to a worker that
// is waiting to read it.
const answerWriteLimit = 5 * time.Second

// answer is what the supervisor tells a worker that needs packages, and
// why the worker must not take another call after this one, if it must not.
type answer struct {
	req    request
	retire string
	// conflict: the call pins another version of a package the worker has loaded.
	conflict bool
}

// resolve answers a worker's need: the files of the packages it is to load,
// or why they cannot be had. It runs on its own goroutine and must not
// touch the worker's per-call fields. A conflict with a package the worker
// has loaded retires the worker after the call, so that the next call that
// needs the other version gets a fresh one.
func (w *worker) resolve(ctx context.Context, id string, need event) answer {
	ans := request{Type: "packages", ID: id}
	if w.pkgs == nil {
		ans.Error = "pyrun: this pool loads no packages"
		return answer{req: ans}
	}
	var retire string
	files, err := w.pkgs.Resolve(ctx, packages.Request{
		Imports: need.Imports, Requires: need.Requires, RequiresPython: need.RequiresPython, Loaded: need.Loaded,
	})
	switch {
	case errors.Is(err, packages.ErrLoadedConflict):
		retire = retireVersionConflict
		fallthrough
	case err != nil:
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (the call was stopped while its packages were fetched)", err)
		}
		ans.Error = err.Error()
	default:
		ans.Files = files
	}
	return answer{req: ans, retire: retire, conflict: retire != ""}
}

// needText and answerText say what a call's packages are doing, for the
// client's live log.
func needText(need event) string {
	what := need.Requires
	if len(what) == 0 {
		what = need.Imports
	}
	return "pyrun: finding packages for " + strings.Join(what, ", ")
}

func answerText(ans request) string {
	if ans.Error != "" {
		return "pyrun: " + ans.Error
	}
	if len(ans.Files) == 0 {
		return "pyrun: no packages to load"
	}
	names := make([]string, len(ans.Files))
	for i, f := range ans.Files {
		names[i] = f.Name + " " + f.Version
	}
	return "pyrun: loading " + strings.Join(names, ", ")
}

// interruptRepeat is how often an interrupted call that has not ended is
// interrupted again during its grace period. Pyodide clears its interrupt
// flag with a read and a separate write, so a signal that lands between the
// two is lost (seen in about one in twenty interrupts of a busy loop).
const interruptRepeat = 100 * time.Millisecond

// interrupt asks the running call to stop: KeyboardInterrupt in Python.
func (w *worker) interrupt() {
	w.interrupts++
	if err := w.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		w.kill("it could not be interrupted")
	}
}

// finish turns the worker's result into the call's.
func (w *worker) finish(res Result, ev event, tr *transcript, stopped string, cfg Config) Result {
	for s := range ev.Dropped {
		tr.dropped(Stream(s))
	}
	tr.rich.dropped(ev)
	tr.fill(&res)
	res.InWorker = time.Duration(ev.DurationMS * float64(time.Millisecond))
	res.Dependencies = ev.Dependencies
	res.Error = capText(ev.Error, cfg.MaxOutput, ev.ErrorCut)
	if ev.Recycle != "" {
		w.retire = ev.Recycle
		tr.notice(false, "the worker is replaced after this call: %s", ev.Recycle)
	}
	switch {
	case stopped != "" && ev.Status == "interrupted":
		// An interrupt that reached Python: the worker is fine to reuse.
		res.Status = StatusTimeout
		res.Error = stoppedError(stopped, res.Error)
	case stopped != "":
		// The call ended on its own just as it was stopped.
		res.Status = Status(ev.Status)
	case ev.Status == "interrupted":
		res.Status = StatusRunError // the code raised KeyboardInterrupt itself
	default:
		res.Status = Status(ev.Status)
	}
	if res.Status == StatusSuccess && ev.Value != nil {
		res.Value = capValue(*ev.Value, cfg.MaxOutput, ev.ValueCut)
	}
	return res
}

// died describes a call whose worker went away.
func (w *worker) died(res Result, tr *transcript, stopped string, broken error) Result {
	<-w.exited
	tr.fill(&res)
	w.retire = "it exited"
	switch {
	case w.killedFor() == killMemory:
		res.Status = StatusMemoryError
		res.Error = "MemoryError: the worker exceeded its memory limit and was stopped"
		tr.notice(true, "the worker exceeded its memory limit; it was killed and is replaced")
	case w.killedFor() == killThreads:
		res.Status = StatusCrashed
		res.Error = "pyrun: the call made more threads than a worker may have (JavaScript Worker threads, --max-worker-threads); the worker was stopped and is replaced"
		tr.notice(true, "the worker made more threads than its limit; it was killed and is replaced")
	case stopped != "":
		res.Status = StatusTimeout
		res.Error = stoppedError(stopped, "")
	default:
		res.Status = StatusCrashed
		var why string
		switch {
		case broken != nil:
			why = broken.Error()
		case w.readErr != nil:
			why = w.readErr.Error()
		default:
			why = "the worker process ended (" + w.exitDescription() + ")"
		}
		res.Error = fmt.Sprintf("pyrun: %s while running the code; the worker was replaced%s", why, w.stderrSuffix())
		tr.notice(true, "the worker died while running the call (%s); it is replaced", w.exitDescription())
	}
	return res
}

func stoppedError(stopped, traceback string) string {
	msg := "TimeoutError: " + stopped + ", and pyrun stopped it"
	if strings.HasPrefix(stopped, "the call was cancelled") {
		msg = "CancelledError: the client cancelled the call, and pyrun stopped it"
	}
	if traceback == "" {
		return msg
	}
	return traceback + "\n\n" + msg
}

// killMemory is the kill reason of a worker past its memory ceiling.
const killMemory = "it exceeded its memory limit"

// kill stops the process at once; safe from any goroutine. The first reason
// given is kept.
func (w *worker) kill(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killReason != "" {
		return
	}
	w.killReason = reason
	_ = w.cmd.Process.Kill()
}

// killedFor says why the supervisor killed the worker; "" if it did not.
func (w *worker) killedFor() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killReason
}

// usable reports whether the worker may take another call.
func (w *worker) usable() bool {
	if w.retire != "" || w.killedFor() != "" {
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
		w.kill("it did not stop")
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

// capText limits an error text to max bytes; cut says the worker already
// cut it.
func capText(s string, max int, cut bool) string {
	if len(s) <= max && !cut {
		return s
	}
	return cutUTF8(s, max) + fmt.Sprintf("\n[pyrun: cut here: it exceeded the limit of %d bytes (max_output)]", max)
}

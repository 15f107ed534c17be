package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// warmRequest lets a fresh worker run n of its warming calls now (docs/protocol.md,
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
				w.tookRich()
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

// capText limits an error text to max bytes; cut says the worker already
// cut it.
func capText(s string, max int, cut bool) string {
	if len(s) <= max && !cut {
		return s
	}
	return cutUTF8(s, max) + fmt.Sprintf("\n[pyrun: cut here: it exceeded the limit of %d bytes (max_output)]", max)
}

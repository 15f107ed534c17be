package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// callEnd is what a call tells of its worker besides the call's result.
type callEnd struct {
	retire      retirement // given: the worker must take no other call, and why
	undelivered bool       // the call never reached the worker: it died first
	// conflict: the call's code did not run, as it pinned another version
	// of a package the worker has loaded.
	conflict bool
}

// run sends job to the worker and collects its result. pkgs resolves the
// packages the call needs; nil: none can be had.
func (c *conn) run(ctx context.Context, job Job, cfg Config, pkgs *packages.Resolver, tr *transcript) (res Result, end callEnd) {
	c.proc.callsBegun.Add(1)
	res = Result{ID: job.ID, Worker: c.proc.name}
	started := time.Now()
	defer func() { res.Duration = time.Since(started) }()

	limit := callLimit(cfg, job)
	line, err := c.callLine(job, cfg)
	if err != nil {
		res.Status, res.Error = StatusCrashed, fmt.Sprintf("pyrun could not encode the call: %v", err)
		return res, end
	}
	if err := c.sendCall(line, limit); err != nil {
		// The line's final newline never reached the worker: no code ran.
		end.undelivered = true
		return c.died(res, tr, "", err, &end), end
	}

	// The worker waits for its packages; the call's own write deadline may
	// have passed while they came.
	needs := newPackageNeeds(ctx, pkgs, job.ID, tr, func(ans request) error { return c.send(ans, answerWriteLimit) })
	tools := newToolCalls(ctx, job, c.writeAnswer)
	// Needs first: a version conflict an answer told of goes before the
	// answer to a tool call that the worker did not take.
	defer finishRequests(&end.retire, needs, tools)
	st := newStopper(ctx, limit, cfg.InterruptGrace, c.interrupt, c.proc.kill, tr, needs, tools)
	defer st.close()
	var broken error // how the worker failed the call, if it did
	fail := func(f *fault) {
		if f == nil {
			return
		}
		if broken == nil {
			broken = f.err
		}
		c.proc.kill(f.retire)
	}
	heard := false // the worker said something about this call
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				res = c.died(res, tr, st.stopped, broken, &end)
				end.undelivered = !heard && !st.stopping() && c.neverRead(len(line))
				return res, end
			}
			if ev.ID != job.ID {
				fail(&fault{fmt.Errorf("%w: event %q for call %q during call %q", errGarbage, ev.Type, ev.ID, job.ID), retireProtocol})
				continue
			}
			heard = true
			switch ev.Type {
			case "need":
				fail(needs.start(ev))
			case "tool_call":
				fail(tools.start(ev))
			case "result":
				end.conflict = needs.result(&ev, st.stopping())
				return c.finish(res, ev, tr, st.stopped, cfg, &end), end
			default:
				fail(c.take(ev, tr, cfg))
			}
		case ans := <-needs.answers():
			fail(needs.took(ans, st.stopping()))
		case ans := <-tools.answers():
			fail(tools.took(ans, st.stopping()))
		case <-st.deadline.C:
			st.timeUp()
		case <-st.done:
			st.cancelled()
		case <-st.repeat:
			st.again()
		case <-st.grace:
			st.outOfGrace()
		}
	}
}

// callLine is the line that hands job to the worker.
func (c *conn) callLine(job Job, cfg Config) ([]byte, error) {
	line, err := json.Marshal(request{
		Type: "run", ID: job.ID, Code: &job.Code, Globals: string(job.Globals),
		MaxOutput: cfg.MaxOutput, Interrupts: c.interrupts, Tools: string(job.Catalog),
		richRequest: newRichRequest(job, cfg), Namespace: job.InSession.Namespace, Drop: job.InSession.Drop,
	})
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// sendCall writes a call's line to the worker; one that does not take it
// is killed.
func (c *conn) sendCall(line []byte, limit time.Duration) error {
	// The worker is idle and reading; a deadline still guards against one
	// that is not. A short call limit must not cut the write of long code.
	_ = c.proc.stdin.SetWriteDeadline(time.Now().Add(max(limit, answerWriteLimit)))
	if _, err := c.proc.stdin.Write(line); err != nil {
		c.proc.kill(retirement{RestartProtocol, "it did not accept a call"})
		return fmt.Errorf("worker did not accept the call: %w", err)
	}
	return nil
}

// take takes an event of the call that neither asks the host for
// something nor ends the call.
func (c *conn) take(ev event, tr *transcript, cfg Config) *fault {
	switch ev.Type {
	case "output":
		tr.add(Stream(ev.Stream), ev.Text)
	case "package":
		if tr.events != nil {
			tr.events.Package(ev.Text)
		}
	case "error":
		return &fault{fmt.Errorf("the worker failed the call: %s", ev.Error), retirement{RestartProtocol, "it failed a call"}}
	case "display", "file":
		c.tookRich()
		if err := tr.rich.add(ev, cfg); err != nil {
			return &fault{err, retireProtocol}
		}
	default:
		return &fault{fmt.Errorf("%w: %q during a call", errGarbage, ev.Type), retireProtocol}
	}
	return nil
}

// finish turns the worker's result into the call's.
func (c *conn) finish(res Result, ev event, tr *transcript, stopped string, cfg Config, end *callEnd) Result {
	if c.ready.Settles {
		c.unsettled = ev.ID
	}
	for s := range ev.Dropped {
		tr.dropped(Stream(s))
	}
	tr.rich.dropped(ev)
	tr.fill(&res)
	res.InWorker = time.Duration(ev.DurationMS * float64(time.Millisecond))
	res.Dependencies = ev.Dependencies
	res.Error = capText(ev.Error, cfg.MaxOutput, ev.ErrorCut)
	if ev.Recycle != "" {
		end.retire = recycled(ev.Recycle)
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
func (c *conn) died(res Result, tr *transcript, stopped string, broken error, end *callEnd) Result {
	p := c.proc
	<-p.exited
	tr.fill(&res)
	end.retire = retireExited
	switch {
	case p.killedFor() == killMemory:
		res.Status = StatusMemoryError
		res.Error = "MemoryError: the worker exceeded its memory limit and was stopped"
		tr.notice(true, "the worker exceeded its memory limit; it was killed and is replaced")
	case p.killedFor() == killThreads:
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
		case c.readErr != nil:
			why = c.readErr.Error()
		default:
			why = "the worker process ended (" + p.exitDescription() + ")"
		}
		res.Error = fmt.Sprintf("pyrun: %s while running the code; the worker was replaced%s", why, p.stderrSuffix())
		tr.notice(true, "the worker died while running the call (%s); it is replaced", p.exitDescription())
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

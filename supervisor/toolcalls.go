package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// ToolCaller runs the host calls a job's code makes while it runs (code
// mode: Python calling the tools of other services). The supervisor knows
// nothing of what a tool is: it hands the worker's request to Call and the
// answer back, and bounds how long and how many. Call is called from
// several goroutines at once; ctx ends when the job's own time limit does,
// when the job is stopped or cancelled, or when it ends with calls still
// running. A nil error carries a result for the code; an error's text is
// what the code sees as the failure.
type ToolCaller interface {
	Call(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error)
}

// maxPendingToolCalls bounds the host calls of one job that may be running
// at once, whatever the ToolCaller allows: a worker is untrusted and must
// not make the supervisor start goroutines without bound. Calls past it are
// refused at once.
const maxPendingToolCalls = 64

// toolCalls runs one job's host calls, each on a goroutine of its own, and
// collects their answers for the goroutine running the job, which alone
// writes them to the worker. It is owned by that goroutine; finish must be
// called before the worker takes another job.
type toolCalls struct {
	caller  ToolCaller
	ctx     context.Context
	cancel  context.CancelFunc
	answers chan request
	pending int       // calls started whose answer has not been taken from answers
	held    []request // answers kept from the worker until the call ends
	wg      sync.WaitGroup
}

// newToolCalls prepares a job's host calls. They end when the call is
// stopped (stop: its time limit, a cancellation) or ends.
func newToolCalls(ctx context.Context, job Job) *toolCalls {
	tc := &toolCalls{caller: job.Tools}
	if job.Tools != nil {
		// Only a job with tools starts calls. Without, answers stays nil
		// (a receive that never fires): its 64 slots of requests were ~16
		// KiB to allocate and clear for every call.
		tc.answers = make(chan request, maxPendingToolCalls)
	}
	tc.ctx, tc.cancel = context.WithCancel(ctx)
	return tc
}

// start runs the host call a tool_call event asks for. A call that cannot
// start is not started: start returns its answer, for the caller to write
// at once (not through answers, which only the calls started fill, so that
// a worker asking for calls without end cannot fill it).
func (tc *toolCalls) start(id string, ev event) (refused *request) {
	ans := request{Type: "tool_result", ID: id, Call: ev.Call}
	switch {
	case tc.caller == nil:
		ans.Error = "pyrun: this call has no tools"
	case tc.pending >= maxPendingToolCalls:
		ans.Error = fmt.Sprintf("pyrun: more than %d tool calls at once", maxPendingToolCalls)
	case tc.ctx.Err() != nil:
		ans.Error = "pyrun: the call is ending: " + ctxWhy(tc.ctx)
	}
	if ans.Error != "" {
		return &ans
	}
	tc.pending++
	tc.wg.Add(1)
	go func() {
		defer tc.wg.Done()
		res, err := tc.caller.Call(tc.ctx, ev.Server, ev.Tool, json.RawMessage(ev.Args))
		switch {
		case err != nil:
			ans.Error = err.Error()
		case !json.Valid(res):
			ans.Error = "pyrun: the tool's result is not JSON"
		default:
			ans.Result = res
		}
		tc.answers <- ans
	}()
	return nil
}

// took records that an answer was taken from answers.
func (tc *toolCalls) took() { tc.pending-- }

// hold keeps an answer from the worker until the call ends: a call being
// stopped must end as stopped (the interrupt), not with the failure of the
// tool call the stop cut short.
func (tc *toolCalls) hold(ans request) { tc.held = append(tc.held, ans) }

// stop cancels the calls still running: their answers come soon after.
func (tc *toolCalls) stop() { tc.cancel() }

// finish stops the calls still running and hands every answer not yet
// taken to write, so that the worker, which waits for an answer to each of
// its calls, never reads one in place of its next request.
func (tc *toolCalls) finish(write func(request) error) error {
	tc.cancel()
	var err error
	for _, ans := range tc.held {
		if err == nil {
			err = write(ans)
		}
	}
	for ; tc.pending > 0; tc.pending-- {
		ans := <-tc.answers
		if err == nil {
			err = write(ans)
		}
	}
	tc.wg.Wait()
	return err
}

func ctxWhy(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "its time limit was reached"
	}
	return "it was stopped"
}

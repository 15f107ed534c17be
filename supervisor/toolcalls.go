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

// toolCalls runs one job's host calls, each on a goroutine of its own. It
// is a hostRequests.
type toolCalls struct {
	caller  ToolCaller
	id      string // the call's
	write   func(request) error
	ctx     context.Context
	cancel  context.CancelFunc
	ch      chan hostAnswer
	pending int          // calls started whose answer has not been taken from ch
	held    []hostAnswer // answers kept from the worker until the call ends
	wg      sync.WaitGroup
}

// newToolCalls prepares a job's host calls, answered with write. They end
// when the call is stopped (stop: its time limit, a cancellation) or ends.
func newToolCalls(ctx context.Context, job Job, write func(request) error) *toolCalls {
	tc := &toolCalls{caller: job.Tools, id: job.ID, write: write}
	if job.Tools != nil {
		// Only a job with tools starts calls. Without, ch stays nil (a
		// receive that never fires): its 64 slots of answers were ~19 KiB
		// to allocate and clear for every call.
		tc.ch = make(chan hostAnswer, maxPendingToolCalls)
	}
	tc.ctx, tc.cancel = context.WithCancel(ctx)
	return tc
}

// start runs the host call a tool_call event asks for. A call that cannot
// start is answered at once, not through ch, which only the calls started
// fill, so that a worker asking for calls without end cannot fill it.
func (tc *toolCalls) start(ev event) *fault {
	ans := request{Type: "tool_result", ID: tc.id, Call: ev.Call}
	switch {
	case tc.caller == nil:
		ans.Error = "pyrun: this call has no tools"
	case tc.pending >= maxPendingToolCalls:
		ans.Error = fmt.Sprintf("pyrun: more than %d tool calls at once", maxPendingToolCalls)
	case tc.ctx.Err() != nil:
		ans.Error = "pyrun: the call is ending: " + ctxWhy(tc.ctx)
	}
	if ans.Error != "" {
		return tc.answer(ans)
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
		tc.ch <- hostAnswer{req: ans}
	}()
	return nil
}

func (tc *toolCalls) answers() <-chan hostAnswer { return tc.ch }

// took holds the answer while the call is stopped: a call being stopped
// must end as stopped (the interrupt), not with the failure of the tool
// call the stop cut short.
func (tc *toolCalls) took(ans hostAnswer, stopping bool) *fault {
	tc.pending--
	if stopping {
		tc.held = append(tc.held, ans)
		return nil
	}
	return tc.answer(ans.req)
}

func (tc *toolCalls) answer(ans request) *fault {
	if err := tc.write(ans); err != nil {
		return &fault{fmt.Errorf("the worker did not take the answer to a tool call: %w", err), retireToolAnswer}
	}
	return nil
}

// stop cancels the calls still running: their answers come soon after.
func (tc *toolCalls) stop() { tc.cancel() }

// finish stops the calls still running and writes every answer not yet
// written, held or still to come.
func (tc *toolCalls) finish(retire retirement) retirement {
	tc.cancel()
	var err error
	for _, ans := range tc.held {
		if err == nil {
			err = tc.write(ans.req)
		}
	}
	for ; tc.pending > 0; tc.pending-- {
		ans := <-tc.ch
		if err == nil {
			err = tc.write(ans.req)
		}
	}
	tc.wg.Wait()
	if err != nil && !retire.given() {
		return retirement{RestartProtocol, "it did not take the answer to a tool call"}
	}
	return retire
}

// retireToolAnswer: the worker did not take the answer to a tool call it
// made.
var retireToolAnswer = retirement{RestartProtocol, "it did not take a tool call's answer"}

func ctxWhy(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "its time limit was reached"
	}
	return "it was stopped"
}

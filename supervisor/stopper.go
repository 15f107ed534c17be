package supervisor

import (
	"context"
	"fmt"
	"time"
)

// stopper stops a call that runs past its time limit or whose context
// ends: it cuts short the call's host requests and interrupts the worker,
// again every interruptRepeat while the call goes on, and kills the worker
// when the call has not ended within grace of the first interrupt. It
// tells the call's Watcher as it does. It is owned by the goroutine
// running the call, whose loop waits on its channels (deadline, done,
// repeat, grace) and calls the method of each; close it when the call
// ends.
type stopper struct {
	interrupt func()           // interrupts the worker
	kill      func(retirement) // kills the worker
	tr        *transcript
	requests  []hostRequests
	limit     time.Duration // the call's time limit
	graceFor  time.Duration // Config.InterruptGrace

	deadline *time.Timer
	done     <-chan struct{}  // the call's context's; nil once it has ended
	repeat   <-chan time.Time // while stopping: interrupt again
	grace    <-chan time.Time // while stopping: kill the worker
	ticker   *time.Ticker

	stopped string // why the supervisor stopped the call; "": it did not
}

func newStopper(ctx context.Context, limit, grace time.Duration, interrupt func(), kill func(retirement), tr *transcript, requests ...hostRequests) *stopper {
	return &stopper{interrupt: interrupt, kill: kill, tr: tr, requests: requests, limit: limit, graceFor: grace,
		deadline: time.NewTimer(limit), done: ctx.Done()}
}

// stopping reports whether the call is being stopped.
func (s *stopper) stopping() bool { return s.stopped != "" }

// timeUp: the deadline fired.
func (s *stopper) timeUp() {
	if s.stopped == "" {
		s.tr.notice(false, "the call reached its time limit of %s; interrupting it", s.limit)
	}
	s.stop(fmt.Sprintf("the call exceeded its time limit of %s", s.limit))
}

// cancelled: done was closed.
func (s *stopper) cancelled() {
	s.done = nil
	s.stop("the call was cancelled")
}

func (s *stopper) stop(why string) {
	if s.stopped != "" {
		return
	}
	s.stopped = why
	for _, r := range s.requests {
		r.stop()
	}
	s.interrupt()
	s.grace = time.After(s.graceFor)
	s.ticker = time.NewTicker(interruptRepeat)
	s.repeat = s.ticker.C
}

// again: repeat fired; the last interrupt may have been lost.
func (s *stopper) again() { s.interrupt() }

// outOfGrace: grace fired.
func (s *stopper) outOfGrace() {
	s.grace, s.repeat = nil, nil
	s.tr.notice(true, "the call did not stop within %s of the interrupt; its worker is killed and replaced", s.graceFor)
	s.kill(retirement{RestartInterrupt, "it did not stop after an interrupt"})
}

func (s *stopper) close() {
	s.deadline.Stop()
	if s.ticker != nil {
		s.ticker.Stop()
	}
}

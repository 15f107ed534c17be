package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// ErrClientBusy is wrapped by the error of a call refused because its client
// already has as many calls as it may.
var ErrClientBusy = errors.New("pyrun is busy for this client")

// ClientLimits bound the calls of one client (Job.Client), so that no
// client can take every worker and every place in line from the others.
type ClientLimits struct {
	// MaxCalls is how many calls of one client may be in the pool at once,
	// running or waiting for a free worker. Less than 1: 1.
	MaxCalls int
	// MaxQueue is how many more calls of that client may wait for one of
	// those places; more are refused at once. Negative: 0.
	MaxQueue int
	// QueueTimeout bounds that wait; a call still waiting then is refused.
	// 0: 60s.
	QueueTimeout time.Duration
}

// Validate checks the limits a user sets (pyrun serve's flags), each named
// as the flag is; a MaxCalls of 0 is the pool's size, worked out by its
// caller.
func (l ClientLimits) Validate() error {
	switch {
	case l.MaxCalls < 0 || l.MaxCalls > 4096:
		return fmt.Errorf("client-max-calls must be between 0 (the pool size) and 4096, not %d", l.MaxCalls)
	case l.MaxQueue < 0 || l.MaxQueue > 4096:
		return fmt.Errorf("client-max-queue must be between 0 and 4096, not %d", l.MaxQueue)
	}
	return nil
}

// LimitClients returns a Runner that runs calls on r within limits (read
// at every call, so they may change), per client. Calls of the Anonymous
// client are not limited: without credentials there is one client.
// A call refused by a limit gets an error wrapping ErrClientBusy and is
// logged as pyrun's pool logs calls it refuses. Calls in sessions take
// the same places: see ClientLimiter.Sessions.
func LimitClients(r Runner, limits func() ClientLimits, log hclog.Logger) *ClientLimiter {
	return &ClientLimiter{r: r, limits: limits, log: log, clients: map[string]*clientLine{}}
}

// ClientLimiter keeps one line per client with calls in flight, whether
// they run in the pool or in sessions. Its methods are safe for
// concurrent use.
type ClientLimiter struct {
	r      Runner
	limits func() ClientLimits
	log    hclog.Logger

	mu      sync.Mutex
	clients map[string]*clientLine // clients with calls in the pool or waiting
}

type clientLine struct {
	inPool  int
	waiting []*clientWaiter // first come, first served
}

type clientWaiter struct {
	ready   chan struct{} // closed when the call gets its place
	granted bool
}

// Run runs a stateless call in the pool, within its client's places.
func (l *ClientLimiter) Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	return l.within(ctx, job, func() (supervisor.Result, error) { return l.r.Run(ctx, job, ev) })
}

// Sessions returns a SessionRunner that runs calls on r within the same
// places as the pool's calls: a call to a session counts against its
// client's client_max_calls and client_max_queue like any other, also
// while it waits for its session's earlier calls, so that no client can
// queue more behind a busy session than it may in the pool.
func (l *ClientLimiter) Sessions(r SessionRunner) SessionRunner {
	return &limitedSessions{l: l, r: r}
}

type limitedSessions struct {
	l *ClientLimiter
	r SessionRunner
}

func (s *limitedSessions) Run(ctx context.Context, c sessions.Call, ev supervisor.Events) (supervisor.Result, error) {
	return s.l.within(ctx, c.Job, func() (supervisor.Result, error) { return s.r.Run(ctx, c, ev) })
}

// within runs run once job's client has a place.
func (l *ClientLimiter) within(ctx context.Context, job supervisor.Job, run func() (supervisor.Result, error)) (supervisor.Result, error) {
	if job.Client == Anonymous || job.Client == "" {
		return run()
	}
	began := time.Now()
	if err := l.acquire(ctx, job.Client); err != nil {
		status := "rejected"
		if ctx.Err() != nil {
			status = "cancelled"
		}
		l.log.Info("call", supervisor.CallLine{Status: status, Queued: new(time.Since(began)), Err: err}.Args(job)...)
		return supervisor.Result{}, err
	}
	defer l.release(job.Client)
	wait := time.Since(began)
	res, err := run()
	if res.Status != "" {
		res.QueueWait += wait
	}
	return res, err
}

func (l *ClientLimiter) current() ClientLimits {
	lim := l.limits()
	lim.MaxCalls = max(lim.MaxCalls, 1)
	lim.MaxQueue = max(lim.MaxQueue, 0)
	if lim.QueueTimeout <= 0 {
		lim.QueueTimeout = 60 * time.Second
	}
	return lim
}

// acquire takes one of client's places in the pool, waiting in its line
// when they are all taken.
func (l *ClientLimiter) acquire(ctx context.Context, client string) error {
	lim := l.current()
	l.mu.Lock()
	line := l.clients[client]
	if line == nil {
		line = &clientLine{}
		l.clients[client] = line
	}
	if line.inPool < lim.MaxCalls && len(line.waiting) == 0 {
		line.inPool++
		l.mu.Unlock()
		return nil
	}
	if len(line.waiting) >= lim.MaxQueue {
		inPool, waiting := line.inPool, len(line.waiting)
		l.mu.Unlock()
		return fmt.Errorf("%w: client %s already has %d calls running or waiting for a worker and %d more waiting, the most one client may have (client_max_calls %d, client_max_queue %d); try again later",
			ErrClientBusy, client, inPool, waiting, lim.MaxCalls, lim.MaxQueue)
	}
	w := &clientWaiter{ready: make(chan struct{})}
	line.waiting = append(line.waiting, w)
	l.mu.Unlock()

	timer := time.NewTimer(lim.QueueTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = fmt.Errorf("waiting for a place among client %s's calls: %w", client, ctx.Err())
	case <-timer.C:
		err = fmt.Errorf("%w: client %s's earlier calls left no room within %s (queue_timeout); try again later",
			ErrClientBusy, client, lim.QueueTimeout)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Given a place as it gave up: pass it on.
		line.inPool--
		l.handOnLocked(client, line)
		return err
	}
	line.waiting = slices.DeleteFunc(line.waiting, func(x *clientWaiter) bool { return x == w })
	l.forgetLocked(client, line)
	return err
}

// release gives back a place of client's.
func (l *ClientLimiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.clients[client]
	line.inPool--
	l.handOnLocked(client, line)
}

// handOnLocked gives free places to the calls first in line.
func (l *ClientLimiter) handOnLocked(client string, line *clientLine) {
	maxCalls := l.current().MaxCalls
	for line.inPool < maxCalls && len(line.waiting) > 0 {
		w := line.waiting[0]
		line.waiting = line.waiting[1:]
		w.granted = true
		line.inPool++
		close(w.ready)
	}
	l.forgetLocked(client, line)
}

func (l *ClientLimiter) forgetLocked(client string, line *clientLine) {
	if line.inPool == 0 && len(line.waiting) == 0 {
		delete(l.clients, client)
	}
}

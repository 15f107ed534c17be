package supervisor

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// waiter is a call queued for a worker (Pool.acquire).
type waiter struct {
	client string        // whose call it is (Job.Client)
	ch     chan *worker  // buffered 1: the worker handed to this call
	broken chan struct{} // closed when no worker can start
}

// Run runs job on a free worker, waiting for one if all are busy, and
// returns its result. Output reaches ev (which may be nil) as it is written;
// an ev that is also a Watcher follows the call through the line too.
// A Python error, a timeout or a crash is a Result; an error means the call
// did not run (queue full, queue timeout, pool closed, or ctx done while
// queued: such a call never starts) or was cancelled through ctx while
// running, which stops it as a timeout does.
func (p *Pool) Run(ctx context.Context, job Job, ev Events) (Result, error) {
	queued := time.Now()
	job = p.forEngine(job)
	watch, _ := ev.(Watcher)
	w, res, wait, err := p.runLive(ctx, job, ev, watch)
	if err != nil {
		p.mu.Lock()
		if ctx.Err() != nil {
			p.counts.Calls["cancelled"]++
		} else {
			p.counts.Rejected++
		}
		p.mu.Unlock()
		status := "rejected"
		if ctx.Err() != nil {
			status = "cancelled"
		}
		p.calls.add(CallLine{Status: status, Queued: new(time.Since(queued)), Err: err}.Args(job)...)
		return Result{}, err
	}
	res.QueueWait = wait
	if !w.retire.given() {
		// Retired now rather than at the health check's next look, which
		// the next call may beat.
		if rss, err := w.residentBytes(); err == nil && w.worseMemory(rss, p.Config()) {
			w.retire = retireMemory
		}
	}
	status := string(res.Status)
	if ctx.Err() != nil {
		status = "cancelled"
	}
	p.settleLater(w, status)
	p.calls.add(CallLine{Status: status, Duration: &res.Duration, Queued: &wait, Worker: w.name}.Args(job)...)
	if ctx.Err() != nil {
		return res, fmt.Errorf("call %s: %w", job.ID, ctx.Err())
	}
	return res, nil
}

// acquire takes a free worker for a call of client, waiting in line when
// none is (poolclients.go says which worker a client may take). A call
// whose ctx is done gets no worker, even one handed to it as it gave up.
func (p *Pool) acquire(ctx context.Context, client string, watch Watcher) (*worker, Config, error) {
	p.mu.Lock()
	cfg := p.cfg
	if p.closed {
		p.mu.Unlock()
		return nil, cfg, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		p.mu.Unlock()
		return nil, cfg, fmt.Errorf("waiting for a worker: %w", err)
	}
	p.dropDeadIdleLocked()
	if err := p.brokenLocked(client); err != nil {
		p.mu.Unlock()
		return nil, cfg, err
	}
	wt := &waiter{client: client, ch: make(chan *worker, 1), broken: make(chan struct{})}
	p.enqueueLocked(wt)
	p.dispatchLocked()
	select {
	case w := <-wt.ch: // a worker was free for it
		p.mu.Unlock()
		return w, cfg, nil
	default:
	}
	if p.queued > cfg.MaxQueue {
		p.dequeueLocked(wt)
		p.mu.Unlock()
		return nil, cfg, ErrQueueFull
	}
	p.mu.Unlock()
	if watch != nil {
		watch.Queued(func() int { return p.position(wt) })
	}

	timer := time.NewTimer(cfg.QueueTimeout)
	defer timer.Stop()
	var err error
	select {
	case w := <-wt.ch:
		if ctx.Err() == nil {
			return w, p.Config(), nil
		}
		// Cancelled as the worker arrived: the call must not start.
		err = fmt.Errorf("waiting for a worker: %w", ctx.Err())
		p.mu.Lock()
		p.giveBackLocked(w)
		p.mu.Unlock()
		return nil, cfg, err
	case <-timer.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = fmt.Errorf("waiting for a worker: %w", ctx.Err())
	case <-p.ctx.Done():
		err = ErrClosed
	case <-wt.broken:
		err = p.brokenErr(client)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dequeueLocked(wt) {
		return nil, cfg, err
	}
	// Out of line already: either a worker was handed over as we gave up
	// (pass it on) or the line was dropped because no worker can start.
	select {
	case w := <-wt.ch:
		p.giveBackLocked(w)
	default:
	}
	return nil, cfg, err
}

// position is wt's place in its client's line (1: next), 0 when it is not
// in line.
func (p *Pool) position(wt *waiter) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Index(p.lines[wt.client], wt) + 1
}

// giveBackLocked takes back a worker handed to a call that gave up before
// using it. p.mu is held.
func (p *Pool) giveBackLocked(w *worker) {
	p.busy--
	delete(p.running, w)
	if w.calls == 0 {
		w.owned, w.client = false, "" // no code of the client reached it
	}
	p.putLocked(w)
	p.drainedLocked()
}

// brokenLocked returns ErrNoWorkers when starts keep failing and no worker
// is alive to take calls of client: none starting, no fresh one idle, none
// of its own (another client's workers are not its to take). p.mu is held.
func (p *Pool) brokenLocked(client string) error {
	if p.failures < 2 || p.starting > 0 || p.freshIdleLocked() > 0 {
		return nil
	}
	for w := range p.running {
		if !w.owned || w.client == client {
			return nil
		}
	}
	for _, w := range p.idle {
		if w.client == client {
			return nil
		}
	}
	return fmt.Errorf("%w: %v", ErrNoWorkers, p.startErr)
}

func (p *Pool) brokenErr(client string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.brokenLocked(client); err != nil {
		return err
	}
	return fmt.Errorf("%w: %v", ErrNoWorkers, p.startErr)
}

// settleLater counts the call as ended and takes w back: at once when it
// has nothing to clean up or is to be retired, else once it has cleaned up
// after the call (conn.settle), on a goroutine of the pool's: the
// caller has its result meanwhile.
func (p *Pool) settleLater(w *worker, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endedLocked(status)
	if w.unsettled == "" || w.retire.given() || p.cfg.Isolation == IsolationProcess {
		p.takeBackLocked(w) // a worker to be retired need not clean up
		return
	}
	w.settling = true
	limit := p.cfg.Timeout
	// Joins p.wg while w is busy, so before Close, which waits for busy
	// workers first, waits on p.wg.
	p.wg.Go(func() {
		if err := w.settle(limit); err != nil {
			w.log.Warn("worker replaced", "reason", err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		w.settling = false
		p.takeBackLocked(w)
	})
}

// endedLocked counts a call that ended. p.mu is held.
func (p *Pool) endedLocked(status string) {
	p.counts.Calls[status]++
	if !p.headStart.IsZero() {
		p.headStart = time.Time{} // the first call is over: the rest of the pool starts
		p.kick()
	}
}

// takeBackLocked makes a busy worker idle again, or retires it. p.mu is held.
func (p *Pool) takeBackLocked(w *worker) {
	p.busy--
	delete(p.running, w)
	// putLocked first: the worker's retirement joins p.wg before Close,
	// woken by drained, waits on it.
	p.putLocked(w)
	p.drainedLocked()
}

// drainedLocked tells a waiting Close when the last call has ended. p.mu is held.
func (p *Pool) drainedLocked() {
	if p.closed && p.busy == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

// putLocked makes w available again, or retires it, and hands the idle
// workers to the calls in line. p.mu is held.
func (p *Pool) putLocked(w *worker) {
	var reason retirement
	switch {
	case !w.usable():
		reason = retireReason(w)
	case p.closed:
		reason = retireClosing
	case w.gen != p.gen:
		reason = retirement{RestartConfig, "the configuration changed"}
	case p.cfg.Isolation == IsolationProcess && w.calls > 0:
		reason = retirement{RestartIsolation, "isolation process: one call per worker"}
	case p.cfg.Isolation == IsolationProcess && len(p.idle)+p.busy+p.starting >= p.cfg.Workers:
		reason = retirement{RestartShrink, "the pool shrank"}
	case !w.owned && p.freshIdleLocked()+p.starting >= p.cfg.Workers:
		reason = retirement{RestartShrink, "the pool shrank"}
	case w.owned && p.ownedLocked()+1 > p.cfg.Workers:
		// Owned workers are bounded by the pool size too (poolclients.go).
		reason = retirement{RestartShrink, "the pool shrank"}
	}
	if reason.given() {
		p.retireLocked(w, reason)
		p.dispatchLocked() // a call a full pool held back may take a fresh worker now
		return
	}
	w.idleSince = time.Now()
	if !w.owned {
		// A worker that has run no call yet goes below those that have:
		// its wasm still runs on V8's baseline code, and the optimising
		// compiler works beside it for a second or more of CPU, so its
		// first calls take 2-3x the CPU of a used worker's (scripts/bench
		// -only firstcalls). Among fresh workers the oldest comes first, as
		// more of that compiling is behind it.
		p.idle = slices.Insert(p.idle, 0, w)
	} else {
		p.idle = append(p.idle, w)
	}
	p.dispatchLocked()
}

// warmBatch is how many warming calls a worker is let run at each of the
// health check's looks (every 200 ms) while the pool is idle: 10-100 ms of
// them, so that a call that comes to another worker shares the CPU with
// warming for no longer than that.
const warmBatch = 20

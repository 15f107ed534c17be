package supervisor

import (
	"context"
	"time"
)

// runLive runs job on a live worker. A worker can die at any moment, also
// while idle or just as a call reaches it (killed from outside, or by a
// timer a previous call left behind). A call whose worker is found dead, or
// out of step with its calls, before the worker has read the call goes to
// another worker: its code never ran, so running it elsewhere is safe. This
// goes on until the call's time limit has passed since it first reached a
// worker; a call the worker has read is never run twice. So does a call
// whose PEP 723 pins conflict with what its worker loaded for earlier calls:
// the worker refused it before its code ran, and a fresh worker can take it.
//
// It returns the worker the call ran on, for the caller to release, and
// how long the call waited for workers; an error means it never ran.
func (p *Pool) runLive(ctx context.Context, job Job, ev Events, watch Watcher) (*worker, Result, time.Duration, error) {
	var waited time.Duration
	var giveUp time.Time
	for {
		queued := time.Now()
		w, cfg, err := p.acquireLive(ctx, job.Client, watch)
		waited += time.Since(queued)
		if err != nil {
			return nil, Result{}, waited, err
		}
		if watch != nil {
			watch.Started(w.name)
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(callLimit(cfg, job))
		}
		res := w.runCall(ctx, job, cfg, newTranscript(cfg.MaxOutput, ev))
		if (!w.undelivered && !w.elsewhere) || ctx.Err() != nil || time.Now().After(giveUp) {
			return w, res, waited, nil
		}
		if w.elsewhere {
			w.log.Info("the call pins another version of a package its worker has loaded; it goes to a fresh worker", "id", job.ID)
			if watch != nil {
				watch.Notice(Notice{Text: "the call needs another version of a package its worker has loaded; it goes to a fresh worker"})
			}
			p.discard(w, w.retire)
			continue
		}
		w.log.Warn("worker died before it took a call; the call goes to another worker",
			"id", job.ID, "exit", w.exitDescription())
		if watch != nil {
			watch.Notice(Notice{Text: "the worker died before it took the call; the call goes to another worker"})
		}
		p.discard(w, retireExited)
	}
}

// MinCallTimeout is the shortest time limit a call gets: a call's own
// timeout below it (1e-7 s, say) is rounded up to it, so that the limit
// cannot pass before the worker has even read the call.
const MinCallTimeout = 100 * time.Millisecond

// callLimit is a call's time limit: its own, capped by the pool's and
// rounded up to MinCallTimeout.
func callLimit(cfg Config, job Job) time.Duration {
	if job.Timeout > 0 && job.Timeout < cfg.Timeout {
		return max(job.Timeout, min(MinCallTimeout, cfg.Timeout))
	}
	return cfg.Timeout
}

// acquireLive is acquire, retiring the workers it hands out that died or
// spoke while idle.
func (p *Pool) acquireLive(ctx context.Context, client string, watch Watcher) (*worker, Config, error) {
	for {
		w, cfg, err := p.acquire(ctx, client, watch)
		if err != nil {
			return nil, cfg, err
		}
		why := w.stale()
		if !why.given() {
			return w, cfg, nil
		}
		p.discard(w, why)
	}
}

// discard retires a worker a call took but did not run on. It counts no
// call.
func (p *Pool) discard(w *worker, why retirement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.retire.given() {
		w.retire = why
	}
	p.giveBackLocked(w)
}

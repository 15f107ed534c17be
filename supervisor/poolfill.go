package supervisor

import (
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// warmIdleLocked lets the workers that have had no call, the pool's and the
// dedicated ones, run a batch of their warming calls (docs/protocol.md, Warming
// calls), while nothing else wants the CPU: the pool whole, no worker
// starting, no call running or waiting. Warming takes about half a core
// and V8's compilers beside it; a start beside it took 25-30% longer
// (scripts/bench -only pool) and a settled worker's calls 1.2x to 1.6x
// (-only reuse). p.mu is held, so no pool call is handed a worker while
// its line is written.
func (p *Pool) warmIdleLocked() {
	if p.closed || p.starting > 0 || p.busy > 0 || p.queued > 0 ||
		p.freshIdleLocked() < p.cfg.Workers || p.dedicatedBusy.Load() > 0 {
		return
	}
	for _, w := range p.idle {
		if !w.owned { // never a client's: only pyrun's own code has run in it
			p.warmLocked(w)
		}
	}
	for w := range p.dedicated {
		if w.callsBegun.Load() == 0 {
			p.warmLocked(w)
		}
	}
}

// warmLocked lets w run its next batch of warming calls, if any are left.
func (p *Pool) warmLocked(w *worker) {
	if n := min(warmBatch, w.ready.WarmCalls-w.warmSent); n > 0 {
		w.warmSent += n
		w.warm(n)
	}
}

// dropDeadIdleLocked retires idle workers whose process has ended (killed
// from outside, say), so that no call is handed a dead worker and the
// filler replaces them at once, without waiting for the health check's next
// look. p.mu is held.
func (p *Pool) dropDeadIdleLocked() {
	alive := p.idle[:0]
	for _, w := range p.idle {
		if w.usable() {
			alive = append(alive, w)
			continue
		}
		if !w.killedFor().given() {
			w.log.Warn("idle worker died", "exit", w.exitDescription())
		}
		p.retireLocked(w, retireReason(w))
	}
	clear(p.idle[len(alive):])
	p.idle = alive
}

// retireLocked stops w in the background and has the filler replace it.
func (p *Pool) retireLocked(w *worker, reason retirement) {
	if !p.closed && reason.kind != restartStopped {
		p.counts.Restarts[reason.kind]++
		p.log.Debug("retiring worker", "worker", w.name, "reason", reason.why, "kind", reason.kind)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		w.close()
	}()
	p.kick()
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its configured size, backing off while starts fail.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var wait time.Duration
		if !p.closed {
			p.dropDeadIdleLocked()
			if d := time.Until(p.retryAt); d > 0 {
				wait = d
			} else {
				for n := p.fillCountLocked(); n < p.cfg.Workers; n++ {
					if hold, ok := p.heldBackLocked(); ok {
						wait = hold
						break
					}
					p.startLocked()
				}
			}
		}
		p.mu.Unlock()
		var retry <-chan time.Time
		if wait > 0 {
			retry = time.After(wait)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-retry:
		}
	}
}

// firstCallHeadStart is how long the pool's first call may run before the
// rest of the pool starts beside it.
const firstCallHeadStart = 500 * time.Millisecond

// heldBackLocked says whether the filler holds back the start of a worker,
// and for how long at most (0: until a start or a call ends). A pool's first
// worker starts alone and runs the first call alone: starts and calls share
// the CPU, and a fresh server's first call waits for its first worker (on 2
// cores, spawn to first result ~0.65 s this way against ~1.0 s with two
// workers starting together). p.mu is held.
func (p *Pool) heldBackLocked() (time.Duration, bool) {
	if p.starting > 0 && p.counts.Starts["snapshot"]+p.counts.Starts["plain"] == 0 {
		return 0, true
	}
	if d := time.Until(p.headStart); d > 0 && p.busy > 0 {
		return d, true
	}
	return 0, false
}

// startLocked starts one worker in the background. p.mu is held.
func (p *Pool) startLocked() {
	p.seq++
	name := fmt.Sprintf("worker-%d", p.seq)
	cfg, gen, pkgs := p.cfg, p.gen, p.pkgs
	p.starting++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		log := p.log.Named(name)
		began := time.Now()
		var snap *Snapshot
		var verify func() error
		if p.snaps != nil {
			snap, verify = p.snaps.get(p.ctx, cfg)
		}
		var w *worker
		preload, err := preloadFiles(p.ctx, pkgs, cfg)
		var cmd *exec.Cmd
		if err == nil && p.primer != nil {
			p.primer.ensure(p.ctx, cfg, snap)
		}
		if err == nil {
			cmd, err = p.newCmd(cfg, launch{snapshot: snap, preload: preload})
		}
		if err == nil {
			w, err = startWorker(p.ctx, name, cmd, cfg, log, p.logs, p.kick, verify)
		}
		if err == nil {
			err = checkEngine(w, p.engine)
		}
		// A start killed from outside says nothing about the snapshot: it
		// must not count towards giving the snapshot up.
		if snap != nil && p.ctx.Err() == nil && !errors.Is(err, errKilledStarting) {
			why := ""
			if w != nil {
				why = w.ready.SnapshotError
			}
			p.snaps.started(snap, err, why)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.starting--
		if err != nil {
			if p.closed {
				return
			}
			if errors.Is(err, errKilledStarting) {
				// Killed from outside: no sign that workers cannot start.
				log.Warn("worker killed while starting; starting another", "error", err)
				p.kick()
				return
			}
			p.failures++
			backoff := min(100*time.Millisecond<<min(p.failures-1, 10), 30*time.Second)
			p.retryAt = time.Now().Add(backoff)
			p.startErr = err
			log.Error("worker failed to start", "error", err, "retry_in", backoff, "failures", p.failures)
			// Nobody is coming for the calls in line of a client with no
			// worker: tell them now rather than at their queue timeout.
			p.dropBrokenLinesLocked()
			p.kick()
			return
		}
		p.failures, p.startErr = 0, nil
		w.gen, w.pkgs = gen, pkgs
		if rss, err := w.residentBytes(); err == nil {
			w.freshRSS.Store(rss) // what a call may not leave it worse than
		}
		from := "plain"
		if w.ready.Snapshot {
			from = "snapshot"
		}
		p.counts.Starts[from]++
		log.Debug("worker ready", "startup", time.Since(began).Round(time.Millisecond),
			"in_worker_ms", w.ready.StartupMS, "from", from)
		if p.counts.Starts["snapshot"]+p.counts.Starts["plain"] == 1 {
			p.headStart = time.Now().Add(firstCallHeadStart)
		}
		p.putLocked(w)
		p.kick() // the workers the first one's start held back
	}()
}

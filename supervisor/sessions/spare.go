package sessions

import (
	"context"
	"time"
)

// A spare worker for the next session. A session's worker is a worker
// start (0.4-0.7 s from the memory snapshot on an idle 2-core machine,
// seconds under load), which a "new" call waits for. Once a session has
// started, the Manager starts one worker ahead for the next: an agent that
// opens one session tends to open more, and one that never does pays
// nothing. Limits.Spares bounds them (default 1; negative: none). A spare
// is dropped when it has waited Limits.Idle unused, when it is lost or no
// longer current (a reload changed how workers start), when there is no
// room for another session, and at Close.

// DefaultSpares is how many workers wait ahead for new sessions.
const DefaultSpares = 1

// current is what a Worker may also say: whether it still starts as a new
// one would (supervisor.Dedicated does). A worker that does not say is.
// spareWorker is a worker started ahead, with when it became ready.
type spareWorker struct {
	w     Worker
	ready time.Time
}

// takeSpareLocked hands out a spare that can serve a new session, dropping
// the ones that cannot; nil when there is none.
func (p *placement) takeSpareLocked() Worker {
	for len(p.spares) > 0 {
		sp := p.spares[0]
		p.spares = p.spares[1:]
		if p.usableLocked(sp) {
			p.spareHits++
			return sp.w
		}
		p.closeWorker(sp.w)
	}
	return nil
}

// awaitSpareLocked is takeSpareLocked for a new session: when no spare is
// ready but one is starting, it waits for that one, which is nearer ready
// than a start of the session's own would be, and which the two would
// slow each other down racing for the cores. nil, nil: none is ready or
// coming; start a worker. p.mu is held, and released while it waits.
func (p *placement) awaitSpareLocked(ctx context.Context) (Worker, error) {
	for {
		if w := p.takeSpareLocked(); w != nil || p.sparesStarting == 0 || p.closed {
			return w, nil
		}
		done := p.spareDone
		p.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			p.mu.Lock()
			return nil, ctx.Err()
		}
		p.mu.Lock()
	}
}

// usableLocked says whether a spare may still serve a new session.
func (p *placement) usableLocked(sp spareWorker) bool {
	if sp.w.Lost() != "" {
		return false
	}
	if !sp.w.Current() {
		return false
	}
	return time.Since(sp.ready) < p.limits.Idle
}

// refillLocked starts spares up to Limits.Spares, while there is room for
// as many more sessions (room). p.mu is held.
func (p *placement) refillLocked(room int) {
	want := max(p.limits.Spares, 0)
	want = min(want, room)
	if p.shared() {
		// A spare becomes a host: together they stay within MaxHosts.
		want = min(want, p.limits.MaxHosts-p.hostCountLocked()-p.hostsPending)
	}
	for ; !p.closed && len(p.spares)+p.sparesStarting < want; p.sparesStarting++ {
		p.wg.Add(1)
		go p.startSpare()
	}
}

// startSpare starts one spare; the Manager's Close stops it.
func (p *placement) startSpare() {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(p.closing, cancel)
	defer stop()
	began := time.Now()
	w, err := p.start(ctx, p.kick)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sparesStarting--
	close(p.spareDone) // a new session waiting for it looks again
	p.spareDone = make(chan struct{})
	if err != nil {
		if !p.closed {
			p.log.Warn("a worker for the next session did not start", "error", err.Error())
		}
		return
	}
	if p.closed {
		p.closeWorker(w)
		return
	}
	p.spares = append(p.spares, spareWorker{w: w, ready: time.Now()})
	p.log.Debug("a worker waits for the next session", "startup", time.Since(began).Round(time.Millisecond))
	p.kick() // the expiry loop drops it when it has waited too long
}

// expireSparesLocked drops the spares that can no longer serve, and says
// when the next one will have waited too long (negative: none waits).
func (p *placement) expireSparesLocked(now time.Time) time.Duration {
	next := time.Duration(-1)
	kept := p.spares[:0]
	for _, sp := range p.spares {
		if len(kept) >= max(p.limits.Spares, 0) || !p.usableLocked(sp) {
			p.closeWorker(sp.w)
			continue
		}
		kept = append(kept, sp)
		if d := sp.ready.Add(p.limits.Idle).Sub(now); next < 0 || d < next {
			next = d
		}
	}
	clear(p.spares[len(kept):])
	p.spares = kept
	return next
}

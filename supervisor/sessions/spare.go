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
type current interface{ Current() bool }

// spareWorker is a worker started ahead, with when it became ready.
type spareWorker struct {
	w     Worker
	ready time.Time
}

// takeSpareLocked hands out a spare that can serve a new session, dropping
// the ones that cannot; nil when there is none.
func (m *Manager) takeSpareLocked() Worker {
	for len(m.spares) > 0 {
		sp := m.spares[0]
		m.spares = m.spares[1:]
		if m.usableLocked(sp) {
			m.counts.SpareHits++
			return sp.w
		}
		m.closeWorker(sp.w)
	}
	return nil
}

// awaitSpareLocked is takeSpareLocked for a new session: when no spare is
// ready but one is starting, it waits for that one, which is nearer ready
// than a start of the session's own would be, and which the two would
// slow each other down racing for the cores. nil, nil: none is ready or
// coming; start a worker. m.mu is held, and released while it waits.
func (m *Manager) awaitSpareLocked(ctx context.Context) (Worker, error) {
	for {
		if w := m.takeSpareLocked(); w != nil || m.sparesStarting == 0 || m.closed {
			return w, nil
		}
		done := m.spareDone
		m.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			m.mu.Lock()
			return nil, ctx.Err()
		}
		m.mu.Lock()
	}
}

// usableLocked says whether a spare may still serve a new session.
func (m *Manager) usableLocked(sp spareWorker) bool {
	if sp.w.Lost() != "" {
		return false
	}
	if c, ok := sp.w.(current); ok && !c.Current() {
		return false
	}
	return time.Since(sp.ready) < m.limits.Idle
}

// refillLocked starts spares up to Limits.Spares, while there is room for
// as many more sessions.
func (m *Manager) refillLocked() {
	want := max(m.limits.Spares, 0)
	open := len(m.open)
	for _, n := range m.starting {
		open += n
	}
	want = min(want, m.limits.Max-open)
	if m.opts.PerHost > 0 {
		// A spare becomes a host: together they stay within MaxHosts.
		want = min(want, m.limits.MaxHosts-m.hostCountLocked()-m.hostsPending)
	}
	for ; !m.closed && len(m.spares)+m.sparesStarting < want; m.sparesStarting++ {
		m.wg.Add(1)
		go m.startSpare()
	}
}

// startSpare starts one spare; the Manager's Close stops it.
func (m *Manager) startSpare() {
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(m.closing, cancel)
	defer stop()
	began := time.Now()
	w, err := m.opts.Start(ctx, m.kick)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sparesStarting--
	close(m.spareDone) // a new session waiting for it looks again
	m.spareDone = make(chan struct{})
	if err != nil {
		if !m.closed {
			m.log.Warn("a worker for the next session did not start", "error", err.Error())
		}
		return
	}
	if m.closed {
		m.closeWorker(w)
		return
	}
	m.spares = append(m.spares, spareWorker{w: w, ready: time.Now()})
	m.log.Debug("a worker waits for the next session", "startup", time.Since(began).Round(time.Millisecond))
	m.kick() // the expiry loop drops it when it has waited too long
}

// expireSparesLocked drops the spares that can no longer serve, and says
// when the next one will have waited too long (negative: none waits).
func (m *Manager) expireSparesLocked(now time.Time) time.Duration {
	next := time.Duration(-1)
	kept := m.spares[:0]
	for _, sp := range m.spares {
		if len(kept) >= max(m.limits.Spares, 0) || !m.usableLocked(sp) {
			m.closeWorker(sp.w)
			continue
		}
		kept = append(kept, sp)
		if d := sp.ready.Add(m.limits.Idle).Sub(now); next < 0 || d < next {
			next = d
		}
	}
	clear(m.spares[len(kept):])
	m.spares = kept
	return next
}

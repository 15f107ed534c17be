package supervisor

import (
	"maps"
	"slices"
	"time"
)

// A worker belongs to one client for its whole life (docs/architecture.md,
// Workers belong to a client). The pool keeps Config.Workers never-used
// workers warm; a call of a client takes, in this order:
//
//  1. an idle worker the client owns, the most recently used first;
//  2. a fresh one, which it then owns (the filler starts a replacement),
//     while the client owns fewer than its cap (clientCapLocked) and the
//     clients together fewer than Config.Workers;
//  3. a fresh one in place of an idle worker of another client that holds
//     more than its share (victimLocked), which is retired;
//  4. else it waits in its client's line.
//
// Lines are per client. A worker a client owns goes only to its client's
// calls; fresh workers go round the clients with calls waiting (order), so
// one client's burst never keeps another's first call waiting for more
// than a fresh worker.

// ClientWorkers are the workers a client owns.
type ClientWorkers struct {
	Idle int `json:"idle"`
	Busy int `json:"busy"`
}

// OtherClients labels the clients past the bound of ClientsWithin.
const OtherClients = "other"

// ClientsWithin is s.Clients with at most n names: the first n clients by
// name, the rest summed as OtherClients, so that many clients cannot make a
// metric or /healthz grow without bound (docs/contract.md, section 13).
func (s Stats) ClientsWithin(n int) map[string]ClientWorkers {
	if len(s.Clients) <= n {
		return s.Clients
	}
	names := slices.Sorted(maps.Keys(s.Clients))
	out := make(map[string]ClientWorkers, n+1)
	for i, name := range names {
		key := name
		if i >= n {
			key = OtherClients
		}
		c := out[key]
		c.Idle += s.Clients[name].Idle
		c.Busy += s.Clients[name].Busy
		out[key] = c
	}
	return out
}

// enqueueLocked puts wt at the end of its client's line. p.mu is held.
func (p *Pool) enqueueLocked(wt *waiter) {
	if len(p.lines[wt.client]) == 0 {
		p.order = append(p.order, wt.client)
	}
	p.lines[wt.client] = append(p.lines[wt.client], wt)
	p.queued++
}

// dequeueLocked takes wt out of its line, reporting whether it was in one.
// p.mu is held.
func (p *Pool) dequeueLocked(wt *waiter) bool {
	line := p.lines[wt.client]
	i := slices.Index(line, wt)
	if i < 0 {
		return false
	}
	p.lines[wt.client] = slices.Delete(line, i, i+1)
	p.queued--
	if len(p.lines[wt.client]) == 0 {
		p.dropClientLocked(wt.client)
	}
	return true
}

// dropClientLocked forgets a client whose line is empty. p.mu is held.
func (p *Pool) dropClientLocked(client string) {
	delete(p.lines, client)
	if i := slices.Index(p.order, client); i >= 0 {
		p.order = slices.Delete(p.order, i, i+1)
	}
}

// dropBrokenLinesLocked tells the calls in line of each client that no
// worker can serve (brokenLocked) so. p.mu is held.
func (p *Pool) dropBrokenLinesLocked() {
	for _, client := range slices.Clone(p.order) {
		if p.brokenLocked(client) == nil {
			continue
		}
		for _, wt := range p.lines[client] {
			close(wt.broken)
		}
		p.queued -= len(p.lines[client])
		p.dropClientLocked(client)
	}
}

// handLocked hands w, idle, to the first call of client's line.
// p.mu is held.
func (p *Pool) handLocked(w *worker, client string) {
	i := slices.Index(p.idle, w)
	p.idle = slices.Delete(p.idle, i, i+1)
	line := p.lines[client]
	wt := line[0]
	p.lines[client] = line[1:]
	p.queued--
	if len(p.lines[client]) == 0 {
		p.dropClientLocked(client)
	}
	if !w.owned {
		w.owned, w.client = true, client
		p.kick() // the filler starts a fresh worker in its place
	}
	p.busy++
	p.running[w] = true
	wt.ch <- w
}

// dispatchLocked hands idle workers to the calls in line while it can.
// p.mu is held.
func (p *Pool) dispatchLocked() {
	for p.queued > 0 && p.handOneLocked() {
	}
}

// handOneLocked hands one idle worker to a call in line, if any may take
// one, and reports whether it did. Fresh workers first, round the clients,
// so that a client whose share another holds gets one before that other
// client's next call takes its own worker back. p.mu is held.
func (p *Pool) handOneLocked() bool {
	owned, total := p.ownedByLocked()
	for _, c := range p.order {
		if p.ownIdleLocked(c) != nil || !p.wantsFreshLocked(c, owned) {
			continue
		}
		if p.freshLocked() == nil {
			break // none idle: the next fresh worker comes back here
		}
		if total >= p.cfg.Workers {
			v := p.victimLocked(c, owned)
			if v == nil {
				continue
			}
			i := slices.Index(p.idle, v)
			p.idle = slices.Delete(p.idle, i, i+1)
			p.retireLocked(v, retireForClient)
		}
		p.handLocked(p.freshLocked(), c)
		// Round-robin: the client goes to the back of the order, if its
		// line is still there.
		if i := slices.Index(p.order, c); i >= 0 {
			p.order = append(slices.Delete(p.order, i, i+1), c)
		}
		return true
	}
	for _, c := range p.order {
		if w := p.ownIdleLocked(c); w != nil {
			p.handLocked(w, c)
			return true
		}
	}
	return false
}

// wantsFreshLocked says whether client may take a fresh worker for a call
// in its line: it is under its cap, and has more calls waiting than workers
// of its own cleaning up after a call (they come back within a fraction
// of a millisecond, and a used worker is faster than a fresh one). p.mu is held.
func (p *Pool) wantsFreshLocked(client string, owned map[string]int) bool {
	if owned[client] >= p.clientCapLocked(client, owned) {
		return false
	}
	settling := 0
	for w := range p.running {
		if w.settling && w.owned && w.client == client {
			settling++
		}
	}
	return len(p.lines[client]) > settling
}

// clientCapLocked is how many workers client may own: all of the pool's
// while no other client owns one or waits, else Config.ClientMaxWorkers.
// Under isolation process no worker serves twice, and a call takes any
// fresh one. p.mu is held.
func (p *Pool) clientCapLocked(client string, owned map[string]int) int {
	if p.cfg.Isolation == IsolationProcess {
		return p.cfg.Workers
	}
	for c, n := range owned {
		if c != client && n > 0 {
			return p.cfg.ClientMaxWorkers
		}
	}
	for _, c := range p.order {
		if c != client {
			return p.cfg.ClientMaxWorkers
		}
	}
	return p.cfg.Workers
}

// victimLocked is the idle worker of another client to retire so that
// client may take a fresh one while the owned workers fill the pool, or
// nil. Its owner must hold more than its cap, or at least two more workers
// than client, or client none at all (a client's first call is never kept
// waiting for another's idle workers); among those, an owner over its cap
// first, then the worker idle longest. p.mu is held.
func (p *Pool) victimLocked(client string, owned map[string]int) *worker {
	var best *worker
	bestOver := false
	for _, w := range p.idle {
		if !w.owned || w.client == client {
			continue
		}
		n := owned[w.client]
		over := n > p.clientCapLocked(w.client, owned)
		if !over && n <= owned[client]+1 && owned[client] > 0 {
			continue
		}
		if best == nil || (over && !bestOver) || (over == bestOver && w.idleSince.Before(best.idleSince)) {
			best, bestOver = w, over
		}
	}
	return best
}

// ownIdleLocked is client's most recently used idle worker, or nil.
// p.mu is held.
func (p *Pool) ownIdleLocked(client string) *worker {
	for i := len(p.idle) - 1; i >= 0; i-- {
		if w := p.idle[i]; w.owned && w.client == client {
			return w
		}
	}
	return nil
}

// freshLocked is the idle never-used worker to hand out next (the oldest:
// putLocked keeps them below the owned ones, the newest lowest), or nil.
// p.mu is held.
func (p *Pool) freshLocked() *worker {
	for i := len(p.idle) - 1; i >= 0; i-- {
		if w := p.idle[i]; !w.owned {
			return w
		}
	}
	return nil
}

// freshIdleLocked counts the idle never-used workers. p.mu is held.
func (p *Pool) freshIdleLocked() int {
	n := 0
	for _, w := range p.idle {
		if !w.owned {
			n++
		}
	}
	return n
}

// ownedByLocked counts the workers each client owns, idle or busy, and
// all of them. p.mu is held.
func (p *Pool) ownedByLocked() (map[string]int, int) {
	by := map[string]int{}
	total := 0
	for _, w := range p.idle {
		if w.owned {
			by[w.client]++
			total++
		}
	}
	for w := range p.running {
		if w.owned {
			by[w.client]++
			total++
		}
	}
	return by, total
}

// ownedLocked counts the workers clients own. p.mu is held.
func (p *Pool) ownedLocked() int {
	_, total := p.ownedByLocked()
	return total
}

// clientWorkersLocked is Stats.Clients. p.mu is held.
func (p *Pool) clientWorkersLocked() map[string]ClientWorkers {
	var m map[string]ClientWorkers
	add := func(w *worker, busy bool) {
		if !w.owned {
			return
		}
		if m == nil {
			m = map[string]ClientWorkers{}
		}
		c := m[w.client]
		if busy {
			c.Busy++
		} else {
			c.Idle++
		}
		m[w.client] = c
	}
	for _, w := range p.idle {
		add(w, false)
	}
	for w := range p.running {
		add(w, true)
	}
	return m
}

// fillCountLocked is what the filler keeps at Config.Workers: the
// never-used workers, idle or starting; under isolation process, where
// every call takes a fresh worker and none serves twice, every worker.
// p.mu is held.
func (p *Pool) fillCountLocked() int {
	if p.cfg.Isolation == IsolationProcess {
		return len(p.idle) + p.busy + p.starting
	}
	return p.freshIdleLocked() + p.starting
}

// retireUnusedLocked retires the clients' workers idle for
// Config.ClientWorkerIdle or longer. p.mu is held.
func (p *Pool) retireUnusedLocked(now time.Time) {
	kept := p.idle[:0]
	var gone []*worker
	for _, w := range p.idle {
		if w.owned && now.Sub(w.idleSince) >= p.cfg.ClientWorkerIdle {
			gone = append(gone, w)
			continue
		}
		kept = append(kept, w)
	}
	if len(gone) == 0 {
		return
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	for _, w := range gone {
		p.retireLocked(w, retireClientIdle)
	}
	p.dispatchLocked()
}

package sessions

import (
	"context"
	"time"
)

// placement finds the workers of new sessions that need none started for
// them: a spare started ahead (spare.go), or a namespace on a shared host
// of the client's (shared.go). It also keeps the hosts that workers
// restored from checkpoints become, so that every worker holding sessions
// counts in Limits.MaxHosts. Its fields are guarded by core.mu, and its
// methods ending in Locked need it held.
type placement struct {
	*core
	start     func(ctx context.Context, exited func()) (Worker, error) // Options.Start
	perHost   int                                                      // Options.PerHost
	anonymous string                                                   // Options.Anonymous

	spares []spareWorker // started ahead for new sessions, oldest first
	// sparesStarting counts spares being started; spareDone is closed and
	// replaced when one ends its start, ready or not.
	sparesStarting int
	spareDone      chan struct{}
	hosts          map[string][]*host // shared workers, by client (shared.go)
	hostsPending   int                // new sessions and restores starting a host
	hostsPendingOf map[string]int     // hostsPending, by client
	// As Stats counts them.
	spareHits, placed, hostStarts, hostRefusals int64
}

func newPlacement(c *core, o Options) *placement {
	return &placement{core: c, start: o.Start, perHost: o.PerHost, anonymous: o.Anonymous,
		spareDone: make(chan struct{}), hostsPendingOf: map[string]int{}}
}

// shared says whether sessions live on shared hosts (Options.PerHost).
func (p *placement) shared() bool { return p.perHost > 0 }

// statsLocked fills in s's figures of spares and hosts. p.mu is held.
func (p *placement) statsLocked(s *Stats) {
	s.Spares, s.SparesStarting, s.SpareHits = len(p.spares), p.sparesStarting, p.spareHits
	s.Hosts, s.HostStarts, s.Placed, s.HostRefusals = p.hostCountLocked(), p.hostStarts, p.placed, p.hostRefusals
}

// expireLocked drops the spares and closes the hosts that can no longer
// serve, and says when it should look again (negative: no need). p.mu is
// held.
func (p *placement) expireLocked(now time.Time) time.Duration {
	next := p.expireSparesLocked(now)
	if d := p.expireHostsLocked(now); d >= 0 && (next < 0 || d < next) {
		next = d
	}
	return next
}

// closeLocked stops the spares and the hosts without sessions, at Close;
// the others close with their last session. p.mu is held.
func (p *placement) closeLocked() {
	for _, sp := range p.spares {
		p.closeWorker(sp.w)
	}
	p.spares = nil
	p.expireHostsLocked(time.Now())
}

// namespace is the namespace of w, a session's worker, on its shared
// host; "": w is a worker of its own.
func (p *placement) namespace(w Worker) string {
	if n, ok := w.(*nsWorker); ok {
		return n.ns
	}
	return ""
}

// sameHost says whether a and b, workers of two sessions, are namespaces
// on one shared host.
func (p *placement) sameHost(a, b Worker) bool {
	na, ok := a.(*nsWorker)
	nb, ok2 := b.(*nsWorker)
	return ok && ok2 && na.h == nb.h
}

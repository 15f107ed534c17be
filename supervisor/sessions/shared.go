package sessions

// Shared session workers (--session-worker shared, docs/sessions.md): the
// sessions of one client live as namespaces on session workers ("hosts")
// of that client's only, each holding up to Options.PerHost sessions. A
// "new" session on a client's host with room starts no process: it costs
// about a warm call. A client's first session takes a spare worker (started
// ahead, spare.go) or starts one, which becomes that client's host for
// good. Calls of different sessions on one host run one at a time (the
// worker runs one call at a time); a host that is lost takes all its
// sessions with it, each saying so in its next result. A host left without
// sessions stays its client's for Limits.Idle (the next "new" is then
// cheap), at most one per client.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// DefaultPerHost is how many sessions one shared worker holds at most.
const DefaultPerHost = 32

// host is a session worker of one client, shared by its sessions.
type host struct {
	owner string
	w     Worker
	// Guarded by core.mu:
	open       int       // sessions on it
	emptySince time.Time // when open fell to 0
	seq        int       // namespaces minted on it
	closed     bool

	mu    sync.Mutex
	drops []string // namespaces of ended sessions, sent with the next call
	gone  string   // why it can take no more calls, once known
}

// tryLost is what a Worker may also say: why it is lost, without waiting
// for a running call (supervisor.Dedicated does).
// lost says why h can take no more calls, without waiting for a call of
// another session; "" while it can, or while that is not known yet.
func (h *host) lost() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone != "" {
		return h.gone
	}
	why := h.w.TryLost()
	h.gone = why
	return why
}

// nsWorker is a session's Worker on a shared host: its namespace there.
type nsWorker struct {
	p    *placement
	h    *host
	ns   string
	once sync.Once
}

// Run runs job in the session's namespace, after the host's worker has
// dropped the namespaces of sessions that ended. The session's last call
// names its own namespace among them: the worker forgets it as soon as the
// result is out, so that the next "new" on the worker finds it nobody's
// and switches in at once (the agent's pattern: a session a run, ended by
// its last call). Close still queues the drop, which then finds nothing.
func (n *nsWorker) Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	n.h.mu.Lock()
	drops := n.h.drops
	n.h.drops = nil
	n.h.mu.Unlock()
	job.InSession.Namespace, job.InSession.Drop = n.ns, drops
	if job.InSession.Last {
		job.InSession.Drop = append(slices.Clip(drops), n.ns)
	}
	res, err := n.h.w.Run(ctx, job, ev)
	if res.Status == "" && !errors.Is(err, supervisor.ErrWorkerLost) {
		// Not sent: the drops go with the next call.
		n.h.mu.Lock()
		n.h.drops = append(drops, n.h.drops...)
		n.h.mu.Unlock()
	}
	return res, err
}

func (n *nsWorker) Lost() string { return n.h.lost() }

// TryLost is Lost: a host never waits for a call to say it is lost.
func (n *nsWorker) TryLost() string { return n.h.lost() }

// Current says whether the session's host starts as a new one would now.
func (n *nsWorker) Current() bool { return n.h.w.Current() }

// Close ends the session's namespace: the host forgets it with its next
// call, and is closed once it has no session and is lost, or has waited
// empty too long (expireHostsLocked).
func (n *nsWorker) Close() {
	n.once.Do(func() {
		n.p.mu.Lock()
		h := n.h
		h.open--
		var closeNow bool
		if h.open == 0 {
			h.emptySince = time.Now()
			closeNow = n.p.closed || h.lost() != "" || n.p.otherEmptyHostLocked(h)
		}
		if closeNow {
			n.p.dropHostLocked(h)
		}
		n.p.mu.Unlock()
		if closeNow {
			h.w.Close()
			return
		}
		h.mu.Lock()
		h.drops = append(h.drops, n.ns)
		h.mu.Unlock()
		n.p.kick() // the expiry loop closes an empty host in time
	})
}

// Checkpoint takes a checkpoint of the whole host, in this session's turn
// and the host's (no other session's call runs meanwhile), marked as this
// session's: a worker started from it keeps this namespace only
// (docs/sessions.md, Durable sessions). It is the session's checkpoint;
// the other namespaces in it are never restored from it.
func (n *nsWorker) Checkpoint(ctx context.Context, take func(*supervisor.Image) error) error {
	return n.h.w.Checkpoint(ctx, func(img *supervisor.Image) error {
		img.Namespace = n.ns
		return take(img)
	})
}

// CheckpointSince is Checkpoint, as an increment to the host's checkpoint
// since when it can be (supervisor.Dedicated.CheckpointSince): the heap is
// the whole host's, whichever session's checkpoint since was.
func (n *nsWorker) CheckpointSince(ctx context.Context, since string, take func(*supervisor.Image) error) error {
	return n.h.w.CheckpointSince(ctx, since, func(img *supervisor.Image) error {
		img.Namespace = n.ns
		return take(img)
	})
}

// Kill stops the host at once: all its sessions are lost.
func (n *nsWorker) Kill(why string) { n.h.w.Kill(why) }

// placeLocked attaches a new session of client to one of the client's
// hosts with room, the one with the fewest sessions; nil when none has
// room. p.mu is held.
func (p *placement) placeLocked(client string) Worker {
	if !p.shared() {
		return nil
	}
	var best *host
	for _, h := range p.hosts[client] {
		if h.closed || h.open >= p.perHost || h.lost() != "" {
			continue
		}
		if !h.w.Current() {
			continue
		}
		if best == nil || h.open < best.open {
			best = h
		}
	}
	if best == nil {
		return nil
	}
	p.placed++
	return p.attachLocked(best)
}

// hostLocked makes w, a worker just started or taken from the spares, a
// host of client's, and attaches a new session to it. p.mu is held.
func (p *placement) hostLocked(client string, w Worker) Worker {
	h := &host{owner: client, w: w}
	if p.hosts == nil {
		p.hosts = map[string][]*host{}
	}
	p.hosts[client] = append(p.hosts[client], h)
	p.hostStarts++
	return p.attachLocked(h)
}

// adoptLocked makes w, a worker started from a checkpoint a shared host
// took for its session of namespace ns (a restore, or a fork), a host of
// client's that holds that session, the only one the worker kept: later
// sessions of the client may join it, and it counts in Limits.MaxHosts
// (a restore beyond it is refused: roomToRestoreLocked). A checkpoint of a worker of
// its own (ns ""), or sessions without shared hosts: w stays the
// session's own. p.mu is held.
func (p *placement) adoptLocked(client string, w Worker, ns string) Worker {
	if !p.shared() || ns == "" {
		return w
	}
	h := &host{owner: client, w: w, open: 1}
	// Names minted on it come after the one it holds.
	if n, err := strconv.Atoi(strings.TrimPrefix(ns, "s")); err == nil && n > 0 {
		h.seq = n
	} else {
		h.seq = 1 << 20
	}
	if p.hosts == nil {
		p.hosts = map[string][]*host{}
	}
	p.hosts[client] = append(p.hosts[client], h)
	p.hostStarts++
	return &nsWorker{p: p, h: h, ns: ns}
}

func (p *placement) attachLocked(h *host) Worker {
	h.open++
	h.seq++
	return &nsWorker{p: p, h: h, ns: fmt.Sprintf("s%d", h.seq)}
}

// otherEmptyHostLocked says whether h's client has another host without
// sessions: one is enough to keep. p.mu is held.
func (p *placement) otherEmptyHostLocked(h *host) bool {
	for _, o := range p.hosts[h.owner] {
		if o != h && !o.closed && o.open == 0 {
			return true
		}
	}
	return false
}

// dropHostLocked forgets h; its caller closes its worker. p.mu is held.
func (p *placement) dropHostLocked(h *host) {
	h.closed = true
	list := slices.DeleteFunc(p.hosts[h.owner], func(o *host) bool { return o == h })
	if len(list) == 0 {
		delete(p.hosts, h.owner)
	} else {
		p.hosts[h.owner] = list
	}
}

// expireHostsLocked closes hosts that have had no session for
// Limits.Idle, or that are lost without sessions, and says when the next
// empty one will have waited too long (negative: none waits). p.mu is held.
func (p *placement) expireHostsLocked(now time.Time) time.Duration {
	next := time.Duration(-1)
	for _, list := range p.hosts {
		for _, h := range slices.Clone(list) {
			if h.open > 0 {
				continue
			}
			at := h.emptySince.Add(p.limits.Idle)
			if p.closed || !now.Before(at) || h.lost() != "" {
				p.dropHostLocked(h)
				p.closeWorker(h.w)
				continue
			}
			if d := at.Sub(now); next < 0 || d < next {
				next = d
			}
		}
	}
	return next
}

// roomForHostLocked makes room for one more host, for a new session (or
// a fork) of client's: it closes another client's empty host when the
// hosts are at Limits.MaxHosts, or says why there is no room. p.mu is
// held.
func (p *placement) roomForHostLocked(client string) error {
	if n, full := p.clientShareFullLocked(client); full {
		return p.errorf(ErrTooMany, ": this client's sessions hold %d session workers, the most one client may hold (client_max_session_workers); end a session, or wait for one to expire", n)
	}
	if p.hostRoomLocked(func(h *host) bool { return h.owner != client }) {
		return nil
	}
	return p.errorf(ErrTooMany, ": %d session workers hold the sessions of other clients, the most pyrun allows (max_session_workers); try again once one has ended its sessions", p.hostCountLocked())
}

// roomToRestoreLocked makes room for the host session id of owner's is
// restored onto, closing an empty host of any client's (owner's own
// included: a restored session cannot join it) when the hosts are at
// Limits.MaxHosts or owner's at Limits.ClientMaxHosts, or says why there
// is none. p.mu is held.
func (p *placement) roomToRestoreLocked(id, owner string) error {
	if n, full := p.clientShareFullLocked(owner); full {
		return p.errorf(ErrNoRoom, " %q from its checkpoint: it needs a session worker of its own, and this client's sessions hold %d, the most one client may hold (client_max_session_workers). The session and its checkpoint are kept: call it again once another of this client's sessions has ended", id, n)
	}
	if p.hostRoomLocked(func(*host) bool { return true }) {
		return nil
	}
	return p.errorf(ErrNoRoom, " %q from its checkpoint: it needs a session worker of its own, and %d are running, the most pyrun allows (max_session_workers). The session and its checkpoint are kept: call it again once another session has ended", id, p.hostCountLocked())
}

// hostRoomLocked says whether one more host fits within Limits.MaxHosts,
// closing an empty host that may go (mayClose) to make room; a refusal is
// counted. p.mu is held.
func (p *placement) hostRoomLocked(mayClose func(*host) bool) bool {
	if p.hostCountLocked()+p.hostsPending < p.limits.MaxHosts {
		return true
	}
	for _, list := range p.hosts {
		for _, h := range list {
			if h.open == 0 && mayClose(h) {
				p.dropHostLocked(h)
				p.closeWorker(h.w)
				return true
			}
		}
	}
	p.hostRefusals++
	return false
}

// clientShareFullLocked says whether client's sessions hold
// Limits.ClientMaxHosts hosts (n), none of them empty: one that is is
// closed to make room (a restored session or a fork cannot join it).
// Options.Anonymous has no share (one user's, as with ClientMax), and the
// refusal is counted. p.mu is held.
func (p *placement) clientShareFullLocked(client string) (n int, full bool) {
	if client == p.anonymous {
		return 0, false
	}
	if n = p.clientHostsLocked(client); n < p.limits.ClientMaxHosts || p.closeEmptyHostLocked(client) {
		return n, false
	}
	p.hostRefusals++
	return n, true
}

// clientHostsLocked is the number of client's hosts open or starting (not
// lost: hostCountLocked). p.mu is held.
func (p *placement) clientHostsLocked(client string) int {
	n := p.hostsPendingOf[client]
	for _, h := range p.hosts[client] {
		if h.lost() == "" {
			n++
		}
	}
	return n
}

// closeEmptyHostLocked closes one of client's hosts that holds no
// session, if there is one. p.mu is held.
func (p *placement) closeEmptyHostLocked(client string) bool {
	for _, h := range p.hosts[client] {
		if h.open == 0 {
			p.dropHostLocked(h)
			p.closeWorker(h.w)
			return true
		}
	}
	return false
}

// pendHostLocked counts a host of client's starting (d 1) or started (d
// -1). p.mu is held.
func (p *placement) pendHostLocked(client string, d int) {
	p.hostsPending += d
	if p.hostsPendingOf[client] += d; p.hostsPendingOf[client] <= 0 {
		delete(p.hostsPendingOf, client)
	}
}

// hostCountLocked is the number of hosts open. A lost host is not: its
// process is gone, and sessions stay on it only until they are restored
// from their checkpoints (durable.go) onto hosts of their own. p.mu is
// held.
func (p *placement) hostCountLocked() int {
	n := 0
	for _, list := range p.hosts {
		for _, h := range list {
			if h.lost() == "" {
				n++
			}
		}
	}
	return n
}

package localsock

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// Limits cap a Guard's connections.
type Limits struct {
	MaxConns int // connections open at once; 0: no cap
}

// Stats count a Guard's connections.
type Stats struct {
	Open          int
	Accepted      uint64
	RefusedPeer   uint64 // another user's process
	RefusedLimits uint64 // past MaxConns
}

// Listener is a net.Listener whose Accept returns only connections of
// trusted peers (Peer.Trusted), within Limits. Others are logged, counted
// and closed at once: nothing is read from them or written to them. Its
// methods are safe for concurrent use.
type Listener struct {
	net.Listener
	lim Limits
	log hclog.Logger

	mu   sync.Mutex
	open int

	accepted, refusedPeer, refusedLimits atomic.Uint64
}

// Guard wraps ln, a listener of Unix sockets.
func Guard(ln net.Listener, lim Limits, log hclog.Logger) *Listener {
	return &Listener{Listener: ln, lim: lim, log: log}
}

// Accept returns the next connection of a trusted peer.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			l.refusedPeer.Add(1)
			l.log.Warn("refused a connection that is not a Unix socket's", "remote", c.RemoteAddr().String())
			continue
		}
		// A refusal is counted and logged before the connection closes, so
		// that a client that sees it closed sees it counted.
		p, err := PeerOf(uc)
		if err != nil || !p.Trusted() {
			l.refusedPeer.Add(1)
			if err != nil {
				l.log.Warn("refused a connection on the socket: its peer is unknown", "error", err)
			} else {
				l.log.Warn("refused a connection on the socket from another user", "uid", p.UID, "pid", p.PID)
			}
			uc.Close()
			continue
		}
		l.mu.Lock()
		if l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns {
			l.mu.Unlock()
			l.refusedLimits.Add(1)
			l.log.Warn("refused a connection on the socket: as many are open as max_socket_conns allows", "max", l.lim.MaxConns, "pid", p.PID)
			uc.Close()
			continue
		}
		l.open++
		l.mu.Unlock()
		l.accepted.Add(1)
		return &conn{UnixConn: uc, l: l, peer: p}, nil
	}
}

// Stats are the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: open, Accepted: l.accepted.Load(), RefusedPeer: l.refusedPeer.Load(), RefusedLimits: l.refusedLimits.Load()}
}

func (l *Listener) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

// conn is an accepted connection; closing it gives its place back.
type conn struct {
	*net.UnixConn
	l    *Listener
	peer Peer
	once sync.Once
}

func (c *conn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(c.l.release)
	return err
}

// PeerOfConn is the peer of a connection a Guard accepted.
func PeerOfConn(c net.Conn) (Peer, bool) {
	gc, ok := c.(*conn)
	if !ok {
		return Peer{}, false
	}
	return gc.peer, true
}

// Validate checks the limits a user sets (pyrun serve's --max-socket-conns).
func (l Limits) Validate() error {
	if l.MaxConns < 1 || l.MaxConns > 65536 {
		return fmt.Errorf("max-socket-conns must be between 1 and 65536, not %d", l.MaxConns)
	}
	return nil
}

package mcp

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// SessionLimits cap the MCP transport sessions open at once (stateful
// Streamable HTTP and HTTP+SSE; a session costs memory and a goroutine for
// as long as it lives). The zero value of each field means its default.
type SessionLimits struct {
	// Max is how many sessions may be open; a new one past it is refused.
	// 0: 1000.
	Max int
	// ClientMax is how many sessions one client (access-control identity, or
	// remote address) may have open; a new one past it closes that client's
	// session idle the longest, or is refused when none is idle. 0: 100.
	ClientMax int
}

// Defaults of SessionLimits.
const (
	DefaultMaxSessions       = 1000
	DefaultClientMaxSessions = 100
)

func (l SessionLimits) withDefaults() SessionLimits {
	if l.Max <= 0 {
		l.Max = DefaultMaxSessions
	}
	if l.ClientMax <= 0 {
		l.ClientMax = DefaultClientMaxSessions
	}
	return l
}

// ErrTooManySessions is wrapped by the error of a session refused by a cap.
var ErrTooManySessions = errors.New("too many MCP sessions")

// sessionCap keeps the open sessions, their clients and when each was last
// used. Its methods are safe for concurrent use.
type sessionCap struct {
	counters *frontCounters
	live     func() map[string]bool // ids of the Streamable HTTP sessions alive

	mu       sync.Mutex
	lim      SessionLimits
	all      map[*capEntry]struct{}
	byID     map[string]*capEntry
	byClient map[string]int
}

// capEntry is one session, or one being opened (id "" on Streamable HTTP).
type capEntry struct {
	client    string
	transport string
	evict     func(id string) // closes the session

	// guarded by sessionCap.mu
	id       string
	last     time.Time
	inflight int        // HTTP requests of the session in flight
	out      *outStream // HTTP+SSE: the stream its results go out on
	opening  bool
	closing  bool          // ended by its client (DELETE): no new requests
	idleCh   chan struct{} // closed when closing and inflight is 0
	removed  bool
}

func newSessionCap(c *frontCounters, live func() map[string]bool) *sessionCap {
	return &sessionCap{counters: c, live: live, lim: SessionLimits{}.withDefaults(),
		all: map[*capEntry]struct{}{}, byID: map[string]*capEntry{}, byClient: map[string]int{}}
}

func (c *sessionCap) setLimits(l SessionLimits) {
	c.mu.Lock()
	c.lim = l.withDefaults()
	c.mu.Unlock()
}

// counts is the sessions open (or opening) and the cap, for /healthz.
func (c *sessionCap) counts() (open, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all), c.lim.Max
}

// admit makes room for a new session of client, evicting the client's
// session idle the longest when the client is at its cap.
func (c *sessionCap) admit(client, transport string, evict func(id string)) (*capEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.all) >= c.lim.Max || c.byClient[client] >= c.lim.ClientMax {
		c.pruneLocked()
	}
	if len(c.all) >= c.lim.Max {
		c.counters.sessionsRefused.WithLabelValues("total").Inc()
		return nil, fmt.Errorf("%w: pyrun has %d MCP sessions open, the most it keeps (max_mcp_sessions %d); end sessions you no longer use (HTTP DELETE) or try again later",
			ErrTooManySessions, len(c.all), c.lim.Max)
	}
	if c.byClient[client] >= c.lim.ClientMax {
		old := c.oldestIdleLocked(client)
		if old == nil {
			c.counters.sessionsRefused.WithLabelValues("client").Inc()
			return nil, fmt.Errorf("%w: client %s has %d MCP sessions open, none of them idle, the most one client may have (client_max_mcp_sessions %d); end sessions you no longer use (HTTP DELETE) or try again later",
				ErrTooManySessions, client, c.byClient[client], c.lim.ClientMax)
		}
		c.removeLocked(old)
		c.counters.sessionsEvicted.Inc()
		go old.evict(old.id) // closing a session waits for its streams to end
	}
	e := &capEntry{client: client, transport: transport, evict: evict, last: time.Now(), opening: true}
	c.all[e] = struct{}{}
	c.byClient[client]++
	return e, nil
}

// opened records the id of a Streamable HTTP session e became ("" when
// none was made), or that an HTTP+SSE session is up.
func (c *sessionCap) opened(e *capEntry, id string, out *outStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.opening, e.out, e.last = false, out, time.Now()
	if e.transport == "streamable" {
		if id == "" || c.byID[id] != nil {
			c.removeLocked(e)
			return
		}
		e.id = id
		c.byID[id] = e
	}
}

// pruneLocked forgets the Streamable HTTP sessions that ended without
// pyrun seeing it (timed out, closed by the SDK).
func (c *sessionCap) pruneLocked() {
	if len(c.byID) == 0 || c.live == nil {
		return
	}
	live := c.live()
	for id, e := range c.byID {
		if !live[id] {
			c.removeLocked(e)
		}
	}
}

func (c *sessionCap) oldestIdleLocked(client string) *capEntry {
	var old *capEntry
	for e := range c.all {
		if e.client != client || e.opening || e.closing || e.inflight > 0 || (e.out != nil && !e.out.idle()) {
			continue
		}
		if old == nil || e.last.Before(old.last) {
			old = e
		}
	}
	return old
}

func (c *sessionCap) remove(e *capEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(e)
}

func (c *sessionCap) removeLocked(e *capEntry) {
	if e.removed {
		return
	}
	e.removed = true
	delete(c.all, e)
	if e.id != "" && c.byID[e.id] == e {
		delete(c.byID, e.id)
	}
	if c.byClient[e.client]--; c.byClient[e.client] <= 0 {
		delete(c.byClient, e.client)
	}
}

// enter counts a request to the Streamable HTTP session id; leave must
// follow. It reports false when the session is being ended.
func (c *sessionCap) enter(id string) (*capEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil {
		return nil, true // unknown to pyrun: the SDK answers
	}
	if e.closing {
		return nil, false
	}
	e.inflight++
	e.last = time.Now()
	return e, true
}

func (c *sessionCap) leave(e *capEntry) {
	if e == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e.inflight--
	e.last = time.Now()
	if e.inflight == 0 && e.idleCh != nil {
		close(e.idleCh)
		e.idleCh = nil
	}
}

// ending marks the session id as ended by its client and returns a channel
// closed once its requests in flight are over (nil when none is).
func (c *sessionCap) ending(id string) (e *capEntry, idle <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e = c.byID[id]
	if e == nil {
		return nil, nil
	}
	e.closing = true
	if e.inflight == 0 {
		return e, nil
	}
	if e.idleCh == nil {
		e.idleCh = make(chan struct{})
	}
	return e, e.idleCh
}

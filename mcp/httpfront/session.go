package httpfront

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pyrun/pyrun/mcp/flow"
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

// Validate checks limits a user set, where a zero is a value and not the
// default, naming each setting as pyrun's flags and config keys do.
func (l SessionLimits) Validate() error {
	switch {
	case l.Max < 1:
		return fmt.Errorf("max-mcp-sessions must be at least 1, not %d", l.Max)
	case l.ClientMax < 1 || l.ClientMax > l.Max:
		return fmt.Errorf("client-max-mcp-sessions must be between 1 and max-mcp-sessions (%d), not %d", l.Max, l.ClientMax)
	}
	return nil
}

// Defaults of SessionLimits.
const (
	DefaultMaxSessions       = 1000
	DefaultClientMaxSessions = 100
)

func (l SessionLimits) withDefaults() SessionLimits {
	l.Max, l.ClientMax = flow.Positive(l.Max, DefaultMaxSessions), flow.Positive(l.ClientMax, DefaultClientMaxSessions)
	return l
}

// ErrTooManySessions is wrapped by the error of a session refused by a cap.
var ErrTooManySessions = errors.New("too many MCP sessions")

// session is one MCP session a client holds: a stateful Streamable HTTP
// session, from its initialize POST until it ends, or an HTTP+SSE session,
// for as long as its GET lasts. Everything pyrun keeps about it is here.
type session struct {
	client    string
	transport string
	evict     func(id string) // closes the session
	// owner is the identity of the client that opened an HTTP+SSE session
	// with credentials, the only one its POSTs are taken from; "": anyone.
	owner   string
	backlog flow.Backlog // the results waiting to be written to it (flow's to guard)

	// guarded by sessionTable.mu
	id       string
	last     time.Time
	inflight int                // its HTTP requests in flight (Streamable HTTP): it is not idle
	posts    int                // those of them that are POSTs, whose answers DELETE waits for
	out      *flow.Stream       // HTTP+SSE: the stream its results go out on
	calls    map[*call]struct{} // its calls running (Streamable HTTP), for DELETE
	opening  bool               // no id yet
	closing  bool               // ended by its client (DELETE): no new requests
	answered chan struct{}      // closed when closing and posts is 0
	removed  bool
}

// call is a tool call running in a session.
type call struct{ cancel context.CancelCauseFunc }

// sessionTable keeps the open sessions: all of them, by id and the number of
// each client's. Its methods are safe for concurrent use; while holding its
// lock they may take flow's (a session's stream), never the other way.
type sessionTable struct {
	counters *flow.Counters
	live     func() map[string]bool // ids of the SDK's sessions alive

	mu       sync.Mutex
	lim      SessionLimits
	all      map[*session]struct{}
	byID     map[string]*session
	byClient map[string]int
}

func newSessionTable(c *flow.Counters, live func() map[string]bool) *sessionTable {
	return &sessionTable{counters: c, live: live, lim: SessionLimits{}.withDefaults(),
		all: map[*session]struct{}{}, byID: map[string]*session{}, byClient: map[string]int{}}
}

func (t *sessionTable) setLimits(l SessionLimits) {
	t.mu.Lock()
	t.lim = l.withDefaults()
	t.mu.Unlock()
}

// counts is the sessions open (or opening) and the cap.
func (t *sessionTable) counts() (open, limit int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all), t.lim.Max
}

// admit makes room for a new session of client, evicting the client's
// session idle the longest when the client is at its cap. owner is the
// identity the session's requests must come with ("": any).
func (t *sessionTable) admit(client, transport, owner string, evict func(id string)) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) >= t.lim.Max || t.byClient[client] >= t.lim.ClientMax {
		t.pruneLocked()
	}
	if len(t.all) >= t.lim.Max {
		t.counters.SessionsRefused.WithLabelValues("total").Inc()
		return nil, fmt.Errorf("%w: pyrun has %d MCP sessions open, the most it keeps (max_mcp_sessions %d); end sessions you no longer use (HTTP DELETE) or try again later",
			ErrTooManySessions, len(t.all), t.lim.Max)
	}
	if t.byClient[client] >= t.lim.ClientMax {
		old := t.oldestIdleLocked(client)
		if old == nil {
			t.counters.SessionsRefused.WithLabelValues("client").Inc()
			return nil, fmt.Errorf("%w: client %s has %d MCP sessions open, none of them idle, the most one client may have (client_max_mcp_sessions %d); end sessions you no longer use (HTTP DELETE) or try again later",
				ErrTooManySessions, client, t.byClient[client], t.lim.ClientMax)
		}
		t.removeLocked(old)
		t.counters.SessionsEvicted.Inc()
		go old.evict(old.id) // closing a session waits for its streams to end
	}
	s := &session{client: client, transport: transport, owner: owner, evict: evict, last: time.Now(), opening: true}
	t.all[s] = struct{}{}
	t.byClient[client]++
	return s, nil
}

// opened records the id of a Streamable HTTP session s became ("" when
// none was made), or that an HTTP+SSE session is up, its results going out
// on out.
func (t *sessionTable) opened(s *session, id string, out *flow.Stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !s.opening {
		return // opened already
	}
	s.opening, s.out, s.last = false, out, time.Now()
	if s.transport == "streamable" {
		if id == "" || t.byID[id] != nil {
			t.removeLocked(s)
			return
		}
		t.nameLocked(s, id)
	}
}

// name records the id of an HTTP+SSE session, from its endpoint event.
func (t *sessionTable) name(s *session, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !s.removed && t.byID[id] == nil {
		t.nameLocked(s, id)
	}
}

func (t *sessionTable) nameLocked(s *session, id string) {
	s.id = id
	t.byID[id] = s
}

// sse is the stream and the owner of the HTTP+SSE session id; nil and ""
// when there is none.
func (t *sessionTable) sse(id string) (*flow.Stream, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byID[id]; s != nil && s.transport == "sse" {
		return s.out, s.owner
	}
	return nil, ""
}

// pruneLocked forgets the Streamable HTTP sessions that ended without
// pyrun seeing it (timed out, closed by the SDK).
func (t *sessionTable) pruneLocked() {
	if len(t.byID) == 0 || t.live == nil {
		return
	}
	live := t.live()
	for id, s := range t.byID {
		if s.transport == "streamable" && !live[id] {
			t.removeLocked(s)
		}
	}
}

func (t *sessionTable) oldestIdleLocked(client string) *session {
	var old *session
	for s := range t.all {
		if s.client != client || s.opening || s.closing || s.inflight > 0 || (s.out != nil && !s.out.Idle()) {
			continue
		}
		if old == nil || s.last.Before(old.last) {
			old = s
		}
	}
	return old
}

func (t *sessionTable) remove(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(s)
}

func (t *sessionTable) removeLocked(s *session) {
	if s.removed {
		return
	}
	s.removed = true
	delete(t.all, s)
	if s.id != "" && t.byID[s.id] == s {
		delete(t.byID, s.id)
	}
	if t.byClient[s.client]--; t.byClient[s.client] <= 0 {
		delete(t.byClient, s.client)
	}
}

// enter counts a request to the Streamable HTTP session id (post: a POST);
// leave must follow. It returns nil, true for a session unknown to pyrun
// (the SDK answers), and false when the session is being ended.
func (t *sessionTable) enter(id string, post bool) (*session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byID[id]
	if s == nil || s.transport != "streamable" {
		return nil, true
	}
	if s.closing {
		return nil, false
	}
	s.inflight++
	if post {
		s.posts++
	}
	s.last = time.Now()
	return s, true
}

func (t *sessionTable) leave(s *session, post bool) {
	if s == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s.inflight--
	s.last = time.Now()
	if !post {
		return
	}
	if s.posts--; s.posts == 0 && s.answered != nil {
		close(s.answered)
		s.answered = nil
	}
}

// track counts a call running in s (nil: none), which ending stops; the
// function returned forgets it.
func (t *sessionTable) track(s *session, cancel context.CancelCauseFunc) func() {
	if s == nil {
		return func() {}
	}
	c := &call{cancel: cancel}
	t.mu.Lock()
	if s.calls == nil {
		s.calls = map[*call]struct{}{}
	}
	s.calls[c] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(s.calls, c)
		t.mu.Unlock()
	}
}

// ending marks the Streamable HTTP session id as ended by its client,
// stops its calls (ErrSessionEnded) and says how many, and returns a
// channel closed once its POSTs in flight have been answered (nil when
// none is). Its event stream (GET) ends with the session.
func (t *sessionTable) ending(id string) (s *session, answered <-chan struct{}, stopped int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s = t.byID[id]
	if s == nil || s.transport != "streamable" {
		return nil, nil, 0
	}
	s.closing = true
	for c := range s.calls {
		c.cancel(ErrSessionEnded)
	}
	if s.posts == 0 {
		return s, nil, len(s.calls)
	}
	if s.answered == nil {
		s.answered = make(chan struct{})
	}
	return s, s.answered, len(s.calls)
}

// Validate checks the settings of o a user sets (pyrun serve's flags), each
// named as the flag is; a KeepAlive of -1 is never.
func (o Options) Validate() error {
	switch {
	case o.SessionTimeout <= 0:
		return fmt.Errorf("session-timeout must be positive, not %s", o.SessionTimeout)
	case o.KeepAlive < -1:
		return fmt.Errorf("keep-alive must not be negative, not %s", o.KeepAlive)
	case o.MaxClients < 1 || o.MaxClients > 1024:
		return fmt.Errorf("metrics-max-clients must be between 1 and 1024, not %d", o.MaxClients)
	}
	return o.Sessions.Validate()
}

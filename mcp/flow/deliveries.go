package flow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pyrun/pyrun/internal/bytesize"
)

// Results on their way to a client. The SDK writes a call's result to the
// event stream or response that carries it (the HTTP+SSE session's GET, the
// POST of a Streamable HTTP call, stdout) after the handler returns, and a
// write to a client that does not read blocks for as long as the client
// wants, holding the result. So pyrun bounds what waits:
//
//   - every write to an HTTP stream has a deadline (WriteTimeout); a stream
//     whose write misses it is closed, which ends an HTTP+SSE session and
//     fails every write still waiting for it at once;
//   - a call's result takes room in its session's and its client's backlog
//     (DeliveryLimits) until bytes as many have been written; a result
//     that finds no room is replaced by a short error, and a call that
//     starts while its session's backlog is full is refused;
//   - on stdio, pyrun reads no new request while the backlog is full.

// DeliveryLimits bound the results that wait to be written to clients. The
// zero value of each field means its default.
type DeliveryLimits struct {
	// WriteTimeout is how long one write to an HTTP response or event stream
	// may take; a stream whose write takes longer is closed. 0: 30s.
	WriteTimeout time.Duration
	// SessionResults is how many results may wait to be written to one
	// session. 0: 32.
	SessionResults int
	// SessionBytes is how many bytes of results may wait for one session
	// (one result is always let through when none waits). 0: 8 MiB.
	SessionBytes int64
	// ClientBytes is how many bytes of results may wait for all the sessions
	// of one client (access-control identity, or remote address); one
	// result is always let through when none waits. 0: 32 MiB.
	ClientBytes int64
}

// Defaults of DeliveryLimits.
const (
	DefaultWriteTimeout   = 30 * time.Second
	DefaultSessionResults = 32
	DefaultSessionBytes   = 8 << 20
	DefaultClientBytes    = 32 << 20
)

// DefaultDeliveryLimits are the limits by default, each field set.
func DefaultDeliveryLimits() DeliveryLimits {
	return DeliveryLimits{WriteTimeout: DefaultWriteTimeout, SessionResults: DefaultSessionResults,
		SessionBytes: DefaultSessionBytes, ClientBytes: DefaultClientBytes}
}

// Validate checks limits a user set, where a zero is a value and not the
// default, naming each setting as pyrun's flags and config keys do
// (docs/configuration.md, What one client can hold).
func (l DeliveryLimits) Validate() error {
	switch {
	case l.WriteTimeout < time.Second:
		return fmt.Errorf("write-timeout must be at least 1s, not %s", l.WriteTimeout)
	case l.SessionResults < 1 || l.SessionResults > 4096:
		return fmt.Errorf("session-pending-results must be between 1 and 4096, not %d", l.SessionResults)
	case l.SessionBytes < 64<<10:
		return fmt.Errorf("session-pending-bytes must be at least 64KiB, not %s", bytesize.Format(l.SessionBytes))
	case l.ClientBytes < l.SessionBytes:
		return fmt.Errorf("client-pending-bytes (%s) must be at least session-pending-bytes (%s)", bytesize.Format(l.ClientBytes), bytesize.Format(l.SessionBytes))
	}
	return nil
}

func (l DeliveryLimits) withDefaults() DeliveryLimits {
	l.WriteTimeout, l.SessionResults = Positive(l.WriteTimeout, DefaultWriteTimeout), Positive(l.SessionResults, DefaultSessionResults)
	l.SessionBytes, l.ClientBytes = Positive(l.SessionBytes, DefaultSessionBytes), Positive(l.ClientBytes, DefaultClientBytes)
	return l
}

// ErrBacklog is wrapped by the error of a call or result refused because its
// client is not reading what pyrun already sent it.
var ErrBacklog = errors.New("the client is not reading its results")

// ErrStalled is the error of a write to a stream already closed for
// stalling.
var ErrStalled = errors.New("the stream was closed: the client did not read it")

// Deliveries account for results waiting to be written, per session and per
// client. Its methods are safe for concurrent use.
type Deliveries struct {
	counters *Counters
	lim      setting[DeliveryLimits]

	mu      sync.Mutex
	clients map[string]*backlog
	total   int64 // bytes waiting, all clients
}

// Backlog is what waits to be written to one session (an MCP session, a
// stateless POST, stdio): its streams' results, together. The record of the
// session holds it; its fields are guarded by Deliveries.mu.
type Backlog struct{ backlog }

// backlog is what waits for one session or one client.
type backlog struct {
	results int
	bytes   int64
	refs    int  // open streams counted here (clients only)
	full    bool // a result found no room, and nothing was written since
}

// NewDeliveries accounts for results waiting, counting what they refuse in c.
func NewDeliveries(c *Counters) *Deliveries {
	d := &Deliveries{counters: c, clients: map[string]*backlog{}}
	d.SetLimits(DeliveryLimits{})
	return d
}

// SetLimits puts new limits in force.
func (d *Deliveries) SetLimits(l DeliveryLimits) { d.lim.set(l.withDefaults()) }

// Limits are the limits in force.
func (d *Deliveries) Limits() DeliveryLimits { return d.lim.get() }

// WaitingBytes is the bytes of results waiting to be written, for /metrics.
func (d *Deliveries) WaitingBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// Stream is one stream that carries results: an HTTP+SSE session's GET,
// a Streamable HTTP POST or GET, stdout. A nil *Stream accounts nothing.
type Stream struct {
	d         *Deliveries
	session   *Backlog
	client    string
	transport string
	onStall   func() // closes the stream; called once
	changed   chan struct{}

	stalled atomic.Bool

	// guarded by d.mu
	results int
	bytes   int64
	calls   int // calls running whose results come here
	closed  bool
}

// Open starts accounting for a stream of session's, of client, on transport
// ("sse", "streamable", "stdio", "socket": a label of the counters).
// onStall, when not nil, closes the stream once a write to it missed its
// deadline. Close it when the stream ends.
func (d *Deliveries) Open(session *Backlog, client, transport string, onStall func()) *Stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &Stream{d: d, session: session, client: client, transport: transport, onStall: onStall,
		changed: make(chan struct{}, 1)}
	c := d.clients[client]
	if c == nil {
		c = &backlog{}
		d.clients[client] = c
	}
	c.refs++
	return st
}

// Transport is the transport the stream was opened on.
func (st *Stream) Transport() string { return st.transport }

// Client is the client the stream was opened for.
func (st *Stream) Client() string { return st.client }

// Close gives back what the stream still holds.
func (st *Stream) Close() {
	if st == nil {
		return
	}
	d := st.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.closed {
		return
	}
	st.closed = true
	st.releaseLocked(st.results, st.bytes)
	if c := d.clients[st.client]; c != nil {
		if c.refs--; c.refs <= 0 {
			delete(d.clients, st.client)
		}
	}
	st.signal()
}

func (st *Stream) releaseLocked(results int, bytes int64) {
	results, bytes = min(results, st.results), min(bytes, st.bytes)
	st.results -= results
	st.bytes -= bytes
	st.d.total -= bytes
	st.session.results -= results
	st.session.bytes -= bytes
	if c := st.d.clients[st.client]; c != nil {
		c.bytes -= bytes
	}
}

func (st *Stream) signal() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

// Wrote accounts for one write of n bytes that reached the client.
func (st *Stream) Wrote(n int) {
	if st == nil {
		return
	}
	st.d.mu.Lock()
	defer st.d.mu.Unlock()
	if st.results == 0 && st.bytes == 0 {
		return
	}
	st.releaseLocked(1, int64(n))
	st.session.full = false
	if c := st.d.clients[st.client]; c != nil {
		c.full = false
	}
	st.signal()
}

// BackedUp says why no more should be sent to st's session now, or nil.
func (st *Stream) BackedUp() error {
	if st == nil {
		return nil
	}
	if st.stalled.Load() {
		return fmt.Errorf("%w: %w", ErrBacklog, ErrStalled)
	}
	d := st.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.closed {
		return nil
	}
	if st.session.full || d.clients[st.client].full {
		return fmt.Errorf("%w: results wait to be written to this session or client, and the last one found no room",
			ErrBacklog)
	}
	return st.fullLocked(0)
}

// fullLocked says whether one more result of n bytes exceeds a backlog.
func (st *Stream) fullLocked(n int64) error {
	lim := st.d.Limits()
	s, c := st.session, st.d.clients[st.client]
	switch {
	case s.results+1 > lim.SessionResults:
		return fmt.Errorf("%w: %d results wait to be written to this session, the most pyrun keeps (session_pending_results %d)",
			ErrBacklog, s.results, lim.SessionResults)
	case s.results > 0 && s.bytes+n > lim.SessionBytes:
		return fmt.Errorf("%w: %s of results wait to be written to this session, the most pyrun keeps (session_pending_bytes %s)",
			ErrBacklog, HumanBytes(int(s.bytes)), HumanBytes(int(lim.SessionBytes)))
	case c.bytes > 0 && c.bytes+n > lim.ClientBytes:
		return fmt.Errorf("%w: %s of results wait to be written to client %s, the most pyrun keeps (client_pending_bytes %s)",
			ErrBacklog, HumanBytes(int(c.bytes)), st.client, HumanBytes(int(lim.ClientBytes)))
	}
	return nil
}

// Admit is called as a call starts: it is refused while its session's
// backlog is full, since its result would have to wait too.
func (st *Stream) Admit() error {
	if st == nil {
		return nil
	}
	if err := st.BackedUp(); err != nil {
		st.d.counters.HeldBack.WithLabelValues(st.transport, "call").Inc()
		return err
	}
	st.d.mu.Lock()
	st.calls++
	st.d.mu.Unlock()
	return nil
}

// Finish is called when the call admitted ends, with its result's size:
// estimate, a count of its text that is a little less than its encoded
// size, and measure, which encodes it. The result takes its room and goes
// out when there is room for it; the error says why not, and the caller
// sends it in the result's place.
func (st *Stream) Finish(estimate int64, measure func() int64) error {
	if st == nil {
		return nil
	}
	d := st.d
	d.mu.Lock()
	st.calls--
	if st.closed {
		d.mu.Unlock()
		return nil
	}
	// The result's size decides only when results already wait (see
	// fullLocked): then it is measured exactly. With none waiting, the
	// usual case, the estimate is enough to account for it until it is
	// written (Wrote releases what was written, at most what was counted),
	// and saves encoding every result twice.
	n := estimate
	if st.session.results > 0 || d.clients[st.client].bytes > 0 {
		d.mu.Unlock()
		n = measure()
		d.mu.Lock()
		if st.closed {
			d.mu.Unlock()
			return nil
		}
	}
	err := st.fullLocked(n)
	if err == nil && st.stalled.Load() {
		err = fmt.Errorf("%w: %w", ErrBacklog, ErrStalled)
	}
	if err == nil {
		st.results++
		st.bytes += n
		d.total += n
		st.session.results++
		st.session.bytes += n
		d.clients[st.client].bytes += n
		d.mu.Unlock()
		return nil
	}
	st.session.full = true
	if strings.Contains(err.Error(), "client_pending_bytes") {
		d.clients[st.client].full = true
	}
	d.mu.Unlock()
	d.counters.HeldBack.WithLabelValues(st.transport, "result").Inc()
	return fmt.Errorf("the result (%s) was dropped: %w; read the event stream or responses, then call again", HumanBytes(int(n)), err)
}

// Idle says whether no call runs and nothing waits for st.
func (st *Stream) Idle() bool {
	st.d.mu.Lock()
	defer st.d.mu.Unlock()
	return st.calls == 0 && st.results == 0
}

// Changed receives when the stream's backlog may have room again (a
// write reached the client, the stream stalled or closed).
func (st *Stream) Changed() <-chan struct{} { return st.changed }

// Stalled says whether the stream was closed for stalling.
func (st *Stream) Stalled() bool { return st.stalled.Load() }

// Stall closes the stream after a write failed; timedOut says it missed
// its deadline, which is counted.
func (st *Stream) Stall(timedOut bool) {
	if st == nil || !st.stalled.CompareAndSwap(false, true) {
		return
	}
	if timedOut {
		st.d.counters.Stalls.WithLabelValues(st.transport).Inc()
	}
	if st.onStall != nil {
		st.onStall()
	}
	st.signal()
}

// streamKey is the context key of the Stream a call's result goes out on.
type streamKey struct{}

// WithStream returns ctx carrying st: the stream the results of the calls
// made in ctx go out on (an HTTP+SSE or stdio session's, a Streamable HTTP
// POST's).
func WithStream(ctx context.Context, st *Stream) context.Context {
	return context.WithValue(ctx, streamKey{}, st)
}

// StreamOf is the Stream ctx carries, or nil.
func StreamOf(ctx context.Context) *Stream {
	st, _ := ctx.Value(streamKey{}).(*Stream)
	return st
}

// HumanBytes writes n bytes for people: 3 MiB, 64 KiB, 1000 bytes.
func HumanBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

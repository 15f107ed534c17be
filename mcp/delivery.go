package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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

func (l DeliveryLimits) withDefaults() DeliveryLimits {
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.SessionResults <= 0 {
		l.SessionResults = DefaultSessionResults
	}
	if l.SessionBytes <= 0 {
		l.SessionBytes = DefaultSessionBytes
	}
	if l.ClientBytes <= 0 {
		l.ClientBytes = DefaultClientBytes
	}
	return l
}

// ErrBacklog is wrapped by the error of a call or result refused because its
// client is not reading what pyrun already sent it.
var ErrBacklog = errors.New("the client is not reading its results")

// errStalled is the error of a write to a stream already closed for stalling.
var errStalled = errors.New("the stream was closed: the client did not read it")

// deliveries accounts for results waiting to be written, per session and per
// client. Its methods are safe for concurrent use.
type deliveries struct {
	counters *frontCounters

	mu       sync.Mutex
	lim      DeliveryLimits
	sessions map[string]*backlog
	clients  map[string]*backlog
	total    int64 // bytes waiting, all clients
}

// backlog is what waits for one session or one client.
type backlog struct {
	results int
	bytes   int64
	refs    int  // open streams counted here
	full    bool // a result found no room, and nothing was written since
}

func newDeliveries(c *frontCounters) *deliveries {
	return &deliveries{counters: c, lim: DeliveryLimits{}.withDefaults(),
		sessions: map[string]*backlog{}, clients: map[string]*backlog{}}
}

func (d *deliveries) setLimits(l DeliveryLimits) {
	d.mu.Lock()
	d.lim = l.withDefaults()
	d.mu.Unlock()
}

func (d *deliveries) limits() DeliveryLimits {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lim
}

// waitingBytes is the bytes of results waiting to be written, for /metrics.
func (d *deliveries) waitingBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// outStream is one stream that carries results: an HTTP+SSE session's GET,
// a Streamable HTTP POST or GET, stdout. A nil *outStream accounts nothing.
type outStream struct {
	d         *deliveries
	session   string // backlog key
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

// outStreamKey is the context key of the outStream an HTTP+SSE or stdio
// session's handlers answer on.
type outStreamKey struct{}

func (d *deliveries) open(session, client, transport string, onStall func()) *outStream {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &outStream{d: d, session: session, client: client, transport: transport, onStall: onStall,
		changed: make(chan struct{}, 1)}
	d.ref(d.sessions, session).refs++
	d.ref(d.clients, client).refs++
	return st
}

func (d *deliveries) ref(m map[string]*backlog, key string) *backlog {
	b := m[key]
	if b == nil {
		b = &backlog{}
		m[key] = b
	}
	return b
}

// close gives back what the stream still holds.
func (st *outStream) close() {
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
	for _, m := range []struct {
		m   map[string]*backlog
		key string
	}{{d.sessions, st.session}, {d.clients, st.client}} {
		if b := m.m[m.key]; b != nil {
			if b.refs--; b.refs <= 0 {
				delete(m.m, m.key)
			}
		}
	}
	st.signal()
}

func (st *outStream) releaseLocked(results int, bytes int64) {
	results, bytes = min(results, st.results), min(bytes, st.bytes)
	st.results -= results
	st.bytes -= bytes
	st.d.total -= bytes
	if b := st.d.sessions[st.session]; b != nil {
		b.results -= results
		b.bytes -= bytes
	}
	if b := st.d.clients[st.client]; b != nil {
		b.bytes -= bytes
	}
}

func (st *outStream) signal() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

// wrote accounts for one write of n bytes that reached the client.
func (st *outStream) wrote(n int) {
	if st == nil {
		return
	}
	st.d.mu.Lock()
	defer st.d.mu.Unlock()
	if st.results == 0 && st.bytes == 0 {
		return
	}
	st.releaseLocked(1, int64(n))
	if b := st.d.sessions[st.session]; b != nil {
		b.full = false
	}
	if b := st.d.clients[st.client]; b != nil {
		b.full = false
	}
	st.signal()
}

// backedUp says why no more should be sent to st's session now, or nil.
func (st *outStream) backedUp() error {
	if st == nil {
		return nil
	}
	if st.stalled.Load() {
		return fmt.Errorf("%w: %w", ErrBacklog, errStalled)
	}
	d := st.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.closed {
		return nil
	}
	if s, c := d.sessions[st.session], d.clients[st.client]; s.full || c.full {
		return fmt.Errorf("%w: results wait to be written to this session or client, and the last one found no room",
			ErrBacklog)
	}
	return st.fullLocked(0)
}

// fullLocked says whether one more result of n bytes exceeds a backlog.
func (st *outStream) fullLocked(n int64) error {
	d := st.d
	s, c := d.sessions[st.session], d.clients[st.client]
	switch {
	case s.results+1 > d.lim.SessionResults:
		return fmt.Errorf("%w: %d results wait to be written to this session, the most pyrun keeps (session_pending_results %d)",
			ErrBacklog, s.results, d.lim.SessionResults)
	case s.results > 0 && s.bytes+n > d.lim.SessionBytes:
		return fmt.Errorf("%w: %s of results wait to be written to this session, the most pyrun keeps (session_pending_bytes %s)",
			ErrBacklog, humanBytes(int(s.bytes)), humanBytes(int(d.lim.SessionBytes)))
	case c.bytes > 0 && c.bytes+n > d.lim.ClientBytes:
		return fmt.Errorf("%w: %s of results wait to be written to client %s, the most pyrun keeps (client_pending_bytes %s)",
			ErrBacklog, humanBytes(int(c.bytes)), st.client, humanBytes(int(d.lim.ClientBytes)))
	}
	return nil
}

// admit is called as a call starts: it is refused while its session's
// backlog is full, since its result would have to wait too.
func (st *outStream) admit() error {
	if st == nil {
		return nil
	}
	if err := st.backedUp(); err != nil {
		st.d.counters.heldBack.WithLabelValues(st.transport, "call").Inc()
		return err
	}
	st.d.mu.Lock()
	st.calls++
	st.d.mu.Unlock()
	return nil
}

// finish is called when the call admitted ends, with its result: the result
// goes out when there is room for it, else a short error in its place.
func (st *outStream) finish(res *sdk.CallToolResult) *sdk.CallToolResult {
	if st == nil || res == nil {
		return res
	}
	d := st.d
	d.mu.Lock()
	st.calls--
	if st.closed {
		d.mu.Unlock()
		return res
	}
	// The result's size decides only when results already wait (see
	// fullLocked): then it is measured exactly, by encoding it. With none
	// waiting, the usual case, a count of its text is enough to account
	// for it until it is written (wrote releases what was written, at
	// most what was counted), and saves encoding every result twice.
	var n int64
	if s, c := d.sessions[st.session], d.clients[st.client]; s.results > 0 || c.bytes > 0 {
		d.mu.Unlock()
		n = int64(1 << 10)
		if b, err := json.Marshal(res); err == nil {
			n = int64(len(b))
		}
		d.mu.Lock()
		if st.closed {
			d.mu.Unlock()
			return res
		}
	} else {
		n = textBytes(res)
	}
	err := st.fullLocked(n)
	if err == nil && st.stalled.Load() {
		err = fmt.Errorf("%w: %w", ErrBacklog, errStalled)
	}
	if err == nil {
		st.results++
		st.bytes += n
		d.total += n
		d.sessions[st.session].results++
		d.sessions[st.session].bytes += n
		d.clients[st.client].bytes += n
		d.mu.Unlock()
		return res
	}
	d.sessions[st.session].full = true
	if strings.Contains(err.Error(), "client_pending_bytes") {
		d.clients[st.client].full = true
	}
	d.mu.Unlock()
	d.counters.heldBack.WithLabelValues(st.transport, "result").Inc()
	return toolError(fmt.Errorf("the result (%s) was dropped: %w; read the event stream or responses, then call again", humanBytes(int(n)), err))
}

// idle says whether no call runs and nothing waits for st.
func (st *outStream) idle() bool {
	st.d.mu.Lock()
	defer st.d.mu.Unlock()
	return st.calls == 0 && st.results == 0
}

// stall closes the stream after a write missed its deadline.
func (st *outStream) stall(timedOut bool) {
	if st == nil || !st.stalled.CompareAndSwap(false, true) {
		return
	}
	if timedOut {
		st.d.counters.stalls.WithLabelValues(st.transport).Inc()
	}
	if st.onStall != nil {
		st.onStall()
	}
	st.signal()
}

// streamFor finds the stream req's result goes out on: the POST that
// carried it (Streamable HTTP), else the session's (HTTP+SSE, stdio).
func (s *Server) streamFor(ctx context.Context, req *sdk.CallToolRequest) *outStream {
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		if v, ok := s.front.posts.Load(req.Extra.Header.Get(deliveryHeader)); ok {
			return v.(*outStream)
		}
	}
	if st, ok := ctx.Value(outStreamKey{}).(*outStream); ok {
		return st
	}
	return nil
}

// deliveryHeader carries the key of a Streamable HTTP POST's outStream to
// the tool handler; whatever a client sends under this name is replaced.
const deliveryHeader = "X-Pyrun-Delivery"

// deliveryWriter puts a deadline on every write and flush of an HTTP
// response, and accounts for what was written.
type deliveryWriter struct {
	http.ResponseWriter
	st      *outStream
	timeout time.Duration
}

func (w *deliveryWriter) Write(b []byte) (int, error) {
	if w.st.stalled.Load() {
		return 0, errStalled
	}
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(w.timeout))
	n, err := w.ResponseWriter.Write(b)
	_ = rc.SetWriteDeadline(time.Time{})
	if err != nil {
		w.st.stall(errors.Is(err, os.ErrDeadlineExceeded))
		return n, err
	}
	w.st.wrote(n)
	return n, nil
}

func (w *deliveryWriter) Flush() {
	_ = w.FlushError()
}

// FlushError is what http.ResponseController calls.
func (w *deliveryWriter) FlushError() error {
	if w.st.stalled.Load() {
		return errStalled
	}
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(w.timeout))
	err := rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.st.stall(errors.Is(err, os.ErrDeadlineExceeded))
		return err
	}
	return nil
}

// Unwrap lets http.ResponseController reach the connection's other controls.
func (w *deliveryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// textBytes counts the text a result carries, a little less than its
// encoded size (JSON's names, quotes and escapes are not counted).
func textBytes(res *sdk.CallToolResult) int64 {
	n := 64
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			n += len(c.Text)
		case *sdk.ImageContent:
			n += len(c.Data) * 4 / 3
		case *sdk.AudioContent:
			n += len(c.Data) * 4 / 3
		default:
			n += 256
		}
	}
	if sc, ok := res.StructuredContent.(Structured); ok {
		n += len(sc.Stdout) + len(sc.Stderr) + len(sc.ReturnValue) + 128*(len(sc.Displays)+len(sc.Files))
		for _, c := range sc.Output {
			n += len(c.Text)
		}
		if sc.Error != nil {
			n += len(*sc.Error)
		}
	}
	return int64(n)
}

// Package netguard bounds what HTTP clients can hold of a server before any
// MCP is spoken: connections (per remote address and in total) and the time
// a request's body may take to arrive. An answer sent before the body was
// read (401, 413, 503) closes the connection instead of reading the rest.
//
//	ln = netguard.Listen(ln, netguard.Limits{Total: 1024, PerAddr: 128})
//	srv := &http.Server{Handler: netguard.Bodies(h, 30*time.Second), ReadHeaderTimeout: 10 * time.Second}
package netguard

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Limits cap connections, and how long a client may take to send a
// request. Zero counts mean no cap.
type Limits struct {
	Total   int // connections open at once
	PerAddr int // connections open at once from one IP address
	// HeaderTimeout bounds how long a request's headers may take to arrive
	// (http.Server's ReadHeaderTimeout), BodyTimeout its body after them
	// (Bodies).
	HeaderTimeout, BodyTimeout time.Duration
}

// DefaultTotal is the cap on connections when the open-files limit leaves
// room for more.
const DefaultTotal = 1024

// TotalFor is the cap on connections that leaves reserve descriptors free
// under the process's open-files limit, at most DefaultTotal: workers
// (pipes, their own files) and the log keep descriptors when clients take
// the rest, so a crashed worker can still be replaced.
func TotalFor(reserve int) int {
	n, ok := openFilesLimit()
	if !ok || n > 1<<30 {
		return DefaultTotal
	}
	return max(16, min(DefaultTotal, int(n)-reserve))
}

// Stats count connections.
type Stats struct {
	Open           int
	RefusedTotal   uint64 // refused by Limits.Total
	RefusedPerAddr uint64 // refused by Limits.PerAddr
	BodiesTimedOut uint64 // request bodies cut off by Bodies' timeout
	AnsweredUnread uint64 // answers sent before the body was read (the connection closed)
}

// Listener is a net.Listener within Limits. A connection past a cap is
// answered 503 and closed at once, so it holds a descriptor only briefly.
// Its methods are safe for concurrent use.
type Listener struct {
	net.Listener
	lim Limits

	mu     sync.Mutex
	open   int
	byAddr map[string]int

	refusedTotal, refusedAddr atomic.Uint64
}

// Listen wraps ln.
func Listen(ln net.Listener, lim Limits) *Listener {
	return &Listener{Listener: ln, lim: lim, byAddr: map[string]int{}}
}

// Accept returns the next connection within the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		switch {
		case l.lim.Total > 0 && l.open >= l.lim.Total:
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			refuse(c, "pyrun has as many connections open as it keeps (max_conns); try again later")
			continue
		case l.lim.PerAddr > 0 && l.byAddr[addr] >= l.lim.PerAddr:
			l.mu.Unlock()
			l.refusedAddr.Add(1)
			refuse(c, "too many connections from this address (max_conns_per_addr); close some and try again")
			continue
		}
		l.open++
		l.byAddr[addr]++
		l.mu.Unlock()
		return &conn{Conn: c, l: l, addr: addr}, nil
	}
}

// refuse answers a connection past a cap without reading it. The write has
// a short deadline: a client that does not read does not keep it.
func refuse(c net.Conn, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: "+
		itoa(len(why)+1)+"\r\n\r\n"+why+"\n")
	_ = c.Close()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// Stats are the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: open, RefusedTotal: l.refusedTotal.Load(), RefusedPerAddr: l.refusedAddr.Load(),
		BodiesTimedOut: bodiesTimedOut.Load(), AnsweredUnread: answeredUnread.Load()}
}

type conn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// Counted across all handlers Bodies wraps (one per process in pyrun).
var bodiesTimedOut, answeredUnread atomic.Uint64

// Bodies wraps h: a request body must arrive within timeout of the handler
// being called, and an answer written before the body was read to its end
// closes the connection rather than reading (and waiting for) the rest;
// net/http would otherwise read up to 256 KiB of it before sending the
// answer, which a client that trickles its body holds off for as long as
// it likes.
func Bodies(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
		b := &body{ReadCloser: r.Body, rc: rc}
		r.Body = b
		h.ServeHTTP(&closeUnread{ResponseWriter: w, b: b}, r)
	})
}

// body clears the read deadline once the body has been read: what follows
// on the connection (the next request) has its own timeouts.
type body struct {
	io.ReadCloser
	rc *http.ResponseController

	mu   sync.Mutex
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.mu.Lock()
		if !b.done {
			b.done = true
			if errors.Is(err, io.EOF) {
				_ = b.rc.SetReadDeadline(time.Time{})
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				bodiesTimedOut.Add(1)
			}
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *body) finished() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// closeUnread marks an answer sent before its request's body was read to
// close the connection.
type closeUnread struct {
	http.ResponseWriter
	b       *body
	started bool
}

func (c *closeUnread) WriteHeader(code int) {
	if !c.started {
		c.started = true
		if !c.b.finished() && code >= 200 {
			c.Header().Set("Connection", "close")
			answeredUnread.Add(1)
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closeUnread) Write(p []byte) (int, error) {
	if !c.started {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(p)
}

func (c *closeUnread) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection's other controls.
func (c *closeUnread) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Validate checks the limits a user sets (pyrun serve's flags), each named
// as the flag is; a Total of 0 is TotalFor's, worked out by its caller.
func (l Limits) Validate() error {
	switch {
	case l.Total < 0:
		return fmt.Errorf("max-conns must not be negative, not %d", l.Total)
	case l.PerAddr < 1:
		return fmt.Errorf("max-conns-per-addr must be at least 1, not %d", l.PerAddr)
	case l.HeaderTimeout < 100*time.Millisecond:
		return fmt.Errorf("header-timeout must be at least 100ms, not %s", l.HeaderTimeout)
	case l.BodyTimeout < 100*time.Millisecond:
		return fmt.Errorf("body-timeout must be at least 100ms, not %s", l.BodyTimeout)
	}
	return nil
}

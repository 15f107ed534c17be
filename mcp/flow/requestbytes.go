package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// RequestLimits bound the bytes of requests pyrun holds at once: HTTP
// request bodies from the moment they start to arrive (counted before they
// are decoded, so that a client over its share is refused before pyrun
// decodes anything), and the arguments of calls in flight, until their
// results are out. A call's arguments cost pyrun about three times their
// size while it waits and runs (the request, the decoded arguments, the
// call for the worker), so these bound most of what calls can make pyrun
// hold. The zero value of each field means its default.
type RequestLimits struct {
	// MaxBytes is what all clients together may have held; 0:
	// DefaultMaxRequestBytes.
	MaxBytes int64
	// ClientMaxBytes is what one client (access-control identity, or
	// remote address; stdio's one client) may have held; 0:
	// DefaultClientMaxRequestBytes.
	ClientMaxBytes int64
}

// Defaults of RequestLimits.
const (
	DefaultMaxRequestBytes       = 64 << 20
	DefaultClientMaxRequestBytes = 16 << 20
)

func (l RequestLimits) withDefaults() RequestLimits {
	l.MaxBytes, l.ClientMaxBytes = Positive(l.MaxBytes, DefaultMaxRequestBytes), Positive(l.ClientMaxBytes, DefaultClientMaxRequestBytes)
	return l
}

// ErrRequestBytes is wrapped by the error of a request refused because
// pyrun, or its client, holds as many request bytes as it may.
var ErrRequestBytes = errors.New("pyrun is busy")

// RequestBytes count the request bytes held, per client and in all. Its
// methods are safe for concurrent use.
type RequestBytes struct {
	counters *Counters
	lim      setting[RequestLimits]

	mu       sync.Mutex
	total    int64
	byClient map[string]int64
	changed  chan struct{} // closed and replaced when bytes are given back
	waiting  int           // readers in wait, for tests
}

// NewRequestBytes counts request bytes, and what its limits refuse in c.
func NewRequestBytes(c *Counters) *RequestBytes {
	b := &RequestBytes{counters: c, byClient: map[string]int64{}, changed: make(chan struct{})}
	b.SetLimits(RequestLimits{})
	return b
}

// SetLimits puts new limits in force.
func (b *RequestBytes) SetLimits(l RequestLimits) { b.lim.set(l.withDefaults()) }

// Limits are the limits in force.
func (b *RequestBytes) Limits() RequestLimits { return b.lim.get() }

// Held is what all clients hold now.
func (b *RequestBytes) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Reserve counts n more bytes held for client, or refuses them with an
// error wrapping ErrRequestBytes (counted in pyrun_requests_refused_total)
// when they would take the client or pyrun past its limit. A client that
// holds nothing always gets its first request's bytes within the client
// limit, which the options check is at least a request's largest size.
// The function returned gives the bytes back; it may be called once.
func (b *RequestBytes) Reserve(client string, n int64) (func(), error) {
	lim := b.Limits()
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := b.byClient[client]
	switch {
	case mine+n > lim.ClientMaxBytes:
		b.counters.Refused.WithLabelValues("client_max_request_bytes").Inc()
		return nil, fmt.Errorf("%w for this client: client %s's requests in flight hold %s, and this one of %s would take them past the %s one client may have held at once (client_max_request_bytes); try again when its calls have finished",
			ErrRequestBytes, client, sizeString(mine), sizeString(n), sizeString(lim.ClientMaxBytes))
	case b.total+n > lim.MaxBytes:
		b.counters.Refused.WithLabelValues("max_request_bytes").Inc()
		return nil, fmt.Errorf("%w: the requests in flight of all clients hold %s, and this one of %s would take them past the %s pyrun holds at once (max_request_bytes); try again later",
			ErrRequestBytes, sizeString(b.total), sizeString(n), sizeString(lim.MaxBytes))
	}
	return b.addLocked(client, n), nil
}

// Force counts n bytes held for client without refusing them: for stdio,
// whose reader waits for room instead (Wait).
func (b *RequestBytes) Force(client string, n int64) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addLocked(client, n)
}

func (b *RequestBytes) addLocked(client string, n int64) func() {
	b.byClient[client] += n
	b.total += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.byClient[client] -= n; b.byClient[client] <= 0 {
				delete(b.byClient, client)
			}
			b.total -= n
			close(b.changed)
			b.changed = make(chan struct{})
		})
	}
}

// Wait returns once client holds nothing, or little enough that n more
// bytes fit within its limit, or ctx ends. It reports whether it waited.
func (b *RequestBytes) Wait(ctx context.Context, client string, n int64) (bool, error) {
	for waited := false; ; waited = true {
		lim := b.Limits()
		b.mu.Lock()
		mine, changed := b.byClient[client], b.changed
		fits := mine == 0 || mine+n <= lim.ClientMaxBytes
		b.mu.Unlock()
		if fits {
			return waited, nil
		}
		b.mu.Lock()
		b.waiting++
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return waited, err
		}
	}
}

// Waiting is how many readers wait in Wait, for tests.
func (b *RequestBytes) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}

// sizeString writes n bytes for people: 512 bytes, 3.0 MiB.
func sizeString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

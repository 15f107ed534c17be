package mcp

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// gate is a Runner whose calls run until the test lets them finish; it
// stands in for the pool in the limiter's own tests (the end-to-end tests
// in cmd/pyrun drive the limiter with real workers).
type gate struct {
	mu      sync.Mutex
	running map[string]int           // by client
	finish  map[string]chan struct{} // a send lets one call of the client finish
	started chan string              // a call reached the pool: its client
}

func newGate() *gate {
	return &gate{running: map[string]int{}, finish: map[string]chan struct{}{}, started: make(chan string, 100)}
}

func (g *gate) ch(client string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.finish[client] == nil {
		g.finish[client] = make(chan struct{})
	}
	return g.finish[client]
}

func (g *gate) Run(ctx context.Context, job supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
	finish := g.ch(job.Client)
	g.mu.Lock()
	g.running[job.Client]++
	g.mu.Unlock()
	g.started <- job.Client
	defer func() {
		g.mu.Lock()
		g.running[job.Client]--
		g.mu.Unlock()
	}()
	select {
	case <-finish:
		return supervisor.Result{Status: supervisor.StatusSuccess}, nil
	case <-ctx.Done():
		return supervisor.Result{}, ctx.Err()
	}
}

// release lets one running call of client finish.
func (g *gate) release(client string) { g.ch(client) <- struct{}{} }

func (g *gate) inPool(client string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[client]
}

func (g *gate) waitStarted(t *testing.T, client string) {
	t.Helper()
	select {
	case c := <-g.started:
		if c != client {
			t.Fatalf("a call of %s reached the pool, want one of %s", c, client)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no call of %s reached the pool", client)
	}
}

func (g *gate) noneStarted(t *testing.T) {
	t.Helper()
	select {
	case c := <-g.started:
		t.Fatalf("a call of %s reached the pool past its limit", c)
	default:
	}
}

func TestClientLimits(t *testing.T) {
	g := newGate()
	var mu sync.Mutex
	lim := ClientLimits{MaxCalls: 2, MaxQueue: 1, QueueTimeout: time.Minute}
	limits := func() ClientLimits { mu.Lock(); defer mu.Unlock(); return lim }
	r := LimitClients(g, limits, testLogger(t))

	type outcome struct {
		res supervisor.Result
		err error
	}
	call := func(ctx context.Context, client string) chan outcome {
		out := make(chan outcome, 1)
		go func() {
			res, err := r.Run(ctx, supervisor.Job{ID: "1", Client: client}, nil)
			out <- outcome{res, err}
		}()
		return out
	}
	// alice: two in the pool, one waiting, the fourth refused at once.
	a1, a2 := call(t.Context(), "alice"), call(t.Context(), "alice")
	g.waitStarted(t, "alice")
	g.waitStarted(t, "alice")
	// Of her next two calls, one waits and one is refused.
	a3, a4 := call(t.Context(), "alice"), call(t.Context(), "alice")
	var refused outcome
	select {
	case refused = <-a4:
	case refused = <-a3:
		a3 = a4
	}
	if !errors.Is(refused.err, ErrClientBusy) {
		t.Fatalf("alice's fourth call: %v, want ErrClientBusy", refused.err)
	}
	g.noneStarted(t)
	// bob is not held up by alice.
	b1 := call(t.Context(), "bob")
	g.waitStarted(t, "bob")
	// Anonymous calls are not limited.
	n1, n2, n3 := call(t.Context(), Anonymous), call(t.Context(), Anonymous), call(t.Context(), Anonymous)
	for range 3 {
		g.waitStarted(t, Anonymous)
	}
	if n := g.inPool("alice"); n != 2 {
		t.Errorf("%d of alice's calls in the pool, want 2", n)
	}
	// One of alice's calls ends: her waiting call takes its place.
	g.release("alice")
	g.waitStarted(t, "alice")
	if n := g.inPool("alice"); n != 2 {
		t.Errorf("%d of alice's calls in the pool, want 2", n)
	}
	g.release("alice")
	g.release("alice")
	g.release("bob")
	for range 3 {
		g.release(Anonymous)
	}
	for _, ch := range []chan outcome{a1, a2, a3, b1, n1, n2, n3} {
		if o := <-ch; o.err != nil || o.res.Status != supervisor.StatusSuccess {
			t.Errorf("%v %v", o.res, o.err)
		}
	}

	t.Run("a waiting call that is cancelled leaves the line", func(t *testing.T) {
		busy := call(t.Context(), "carol")
		busy2 := call(t.Context(), "carol")
		g.waitStarted(t, "carol")
		g.waitStarted(t, "carol")
		ctx, cancel := context.WithCancel(t.Context())
		waiting := call(ctx, "carol")
		cancel()
		if o := <-waiting; !errors.Is(o.err, context.Canceled) {
			t.Errorf("cancelled waiting call: %v", o.err)
		}
		// Its place in line is free again.
		next := call(t.Context(), "carol")
		g.noneStarted(t)
		g.release("carol")
		g.waitStarted(t, "carol")
		g.release("carol")
		g.release("carol")
		for _, ch := range []chan outcome{busy, busy2, next} {
			if o := <-ch; o.err != nil {
				t.Error(o.err)
			}
		}
	})

	t.Run("a call waits at most the queue timeout", func(t *testing.T) {
		mu.Lock()
		lim = ClientLimits{MaxCalls: 1, MaxQueue: 1, QueueTimeout: 200 * time.Millisecond}
		mu.Unlock()
		busy := call(t.Context(), "dave")
		g.waitStarted(t, "dave")
		began := time.Now()
		o := <-call(t.Context(), "dave")
		if waited := time.Since(began); !errors.Is(o.err, ErrClientBusy) || waited < 200*time.Millisecond || waited > 5*time.Second {
			t.Errorf("after %v: %v; want ErrClientBusy after 200ms", waited, o.err)
		}
		g.release("dave")
		<-busy
	})

	t.Run("no waiting at all with MaxQueue 0", func(t *testing.T) {
		mu.Lock()
		lim = ClientLimits{MaxCalls: 1, MaxQueue: 0}
		mu.Unlock()
		busy := call(t.Context(), "erin")
		g.waitStarted(t, "erin")
		if o := <-call(t.Context(), "erin"); !errors.Is(o.err, ErrClientBusy) {
			t.Errorf("second call with MaxQueue 0: %v", o.err)
		}
		g.release("erin")
		<-busy
	})
}

// sessionGate is a SessionRunner that runs its calls on a gate.
type sessionGate struct{ g *gate }

func (s sessionGate) Run(ctx context.Context, c sessions.Call, ev supervisor.Events) (supervisor.Result, error) {
	return s.g.Run(ctx, c.Job, ev)
}

// A session's calls take the same places as the client's pool calls: they
// count against client_max_calls and client_max_queue, also while they
// wait behind the session's busy call (120 large calls queued behind one
// busy session were all accepted).
func TestClientLimitsCountSessionCalls(t *testing.T) {
	g := newGate()
	lim := LimitClients(g, func() ClientLimits { return ClientLimits{MaxCalls: 1, MaxQueue: 2, QueueTimeout: time.Minute} }, testLogger(t))
	sess := lim.Sessions(sessionGate{g})
	type outcome struct {
		res supervisor.Result
		err error
	}
	inSession := func(client string) chan outcome {
		out := make(chan outcome, 1)
		go func() {
			res, err := sess.Run(t.Context(), sessions.Call{Session: "s1", Job: supervisor.Job{ID: "1", Client: client}}, nil)
			out <- outcome{res, err}
		}()
		return out
	}
	busy := inSession("alice")
	g.waitStarted(t, "alice")
	// Of seven more in the session and one in the pool, two wait for her
	// place and the rest are refused at once.
	type indexed struct {
		i int
		o outcome
	}
	done := make(chan indexed, 8)
	for i := range 8 {
		go func() {
			var o outcome
			if i < 7 {
				o.res, o.err = sess.Run(t.Context(), sessions.Call{Session: "s1", Job: supervisor.Job{ID: "1", Client: "alice"}}, nil)
			} else {
				o.res, o.err = lim.Run(t.Context(), supervisor.Job{ID: "2", Client: "alice"}, nil)
			}
			done <- indexed{i, o}
		}()
	}
	for range 6 {
		select {
		case d := <-done:
			if !errors.Is(d.o.err, ErrClientBusy) {
				t.Fatalf("a call past alice's places: %v %v, want ErrClientBusy", d.o.res, d.o.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("fewer than 6 of alice's 8 calls past her place were refused")
		}
	}
	lim.mu.Lock()
	waitingNow := len(lim.clients["alice"].waiting)
	lim.mu.Unlock()
	if waitingNow != 2 {
		t.Errorf("%d of alice's calls wait for a place, want 2 (client_max_queue)", waitingNow)
	}
	g.noneStarted(t)
	// Session calls of anonymous clients are not limited.
	anon := inSession(Anonymous)
	g.waitStarted(t, Anonymous)
	g.release(Anonymous)
	for i := range 3 {
		g.release("alice")
		if i < 2 {
			g.waitStarted(t, "alice")
		}
	}
	for range 2 {
		if d := <-done; d.o.err != nil {
			t.Error(d.o.err)
		}
	}
	for _, ch := range []chan outcome{busy, anon} {
		if o := <-ch; o.err != nil {
			t.Error(o.err)
		}
	}
}

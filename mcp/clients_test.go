package mcp

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

func TestClientLimits(t *testing.T) {
	g := mcptest.NewGate()
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
	g.WaitStarted(t, "alice")
	g.WaitStarted(t, "alice")
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
	g.NoneStarted(t)
	// bob is not held up by alice.
	b1 := call(t.Context(), "bob")
	g.WaitStarted(t, "bob")
	// Anonymous calls are not limited.
	n1, n2, n3 := call(t.Context(), Anonymous), call(t.Context(), Anonymous), call(t.Context(), Anonymous)
	for range 3 {
		g.WaitStarted(t, Anonymous)
	}
	if n := g.Running("alice"); n != 2 {
		t.Errorf("%d of alice's calls in the pool, want 2", n)
	}
	// One of alice's calls ends: her waiting call takes its place.
	g.Release("alice")
	g.WaitStarted(t, "alice")
	if n := g.Running("alice"); n != 2 {
		t.Errorf("%d of alice's calls in the pool, want 2", n)
	}
	g.Release("alice")
	g.Release("alice")
	g.Release("bob")
	for range 3 {
		g.Release(Anonymous)
	}
	for _, ch := range []chan outcome{a1, a2, a3, b1, n1, n2, n3} {
		if o := <-ch; o.err != nil || o.res.Status != supervisor.StatusSuccess {
			t.Errorf("%v %v", o.res, o.err)
		}
	}

	t.Run("a waiting call that is cancelled leaves the line", func(t *testing.T) {
		busy := call(t.Context(), "carol")
		busy2 := call(t.Context(), "carol")
		g.WaitStarted(t, "carol")
		g.WaitStarted(t, "carol")
		ctx, cancel := context.WithCancel(t.Context())
		waiting := call(ctx, "carol")
		cancel()
		if o := <-waiting; !errors.Is(o.err, context.Canceled) {
			t.Errorf("cancelled waiting call: %v", o.err)
		}
		// Its place in line is free again.
		next := call(t.Context(), "carol")
		g.NoneStarted(t)
		g.Release("carol")
		g.WaitStarted(t, "carol")
		g.Release("carol")
		g.Release("carol")
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
		g.WaitStarted(t, "dave")
		began := time.Now()
		o := <-call(t.Context(), "dave")
		if waited := time.Since(began); !errors.Is(o.err, ErrClientBusy) || waited < 200*time.Millisecond || waited > 5*time.Second {
			t.Errorf("after %v: %v; want ErrClientBusy after 200ms", waited, o.err)
		}
		g.Release("dave")
		<-busy
	})

	t.Run("no waiting at all with MaxQueue 0", func(t *testing.T) {
		mu.Lock()
		lim = ClientLimits{MaxCalls: 1, MaxQueue: 0}
		mu.Unlock()
		busy := call(t.Context(), "erin")
		g.WaitStarted(t, "erin")
		if o := <-call(t.Context(), "erin"); !errors.Is(o.err, ErrClientBusy) {
			t.Errorf("second call with MaxQueue 0: %v", o.err)
		}
		g.Release("erin")
		<-busy
	})
}

// sessionGate is a SessionRunner that runs its calls on a gate.
type sessionGate struct{ g *mcptest.Gate }

func (s sessionGate) Run(ctx context.Context, c sessions.Call, ev supervisor.Events) (supervisor.Result, error) {
	return s.g.Run(ctx, c.Job, ev)
}

// A session's calls take the same places as the client's pool calls: they
// count against client_max_calls and client_max_queue, also while they
// wait behind the session's busy call (120 large calls queued behind one
// busy session were all accepted).
func TestClientLimitsCountSessionCalls(t *testing.T) {
	g := mcptest.NewGate()
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
	g.WaitStarted(t, "alice")
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
	g.NoneStarted(t)
	// Session calls of anonymous clients are not limited.
	anon := inSession(Anonymous)
	g.WaitStarted(t, Anonymous)
	g.Release(Anonymous)
	for i := range 3 {
		g.Release("alice")
		if i < 2 {
			g.WaitStarted(t, "alice")
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

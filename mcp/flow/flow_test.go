package flow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// count is the value of vec's counter with the label values given.
func count(t *testing.T, vec *prometheus.CounterVec, values ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(vec)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
	metrics:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if i >= len(values) || l.GetValue() != values[i] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// wantHeldBack checks the count of what (call or result) held back on
// sessions of the transport.
func wantHeldBack(t *testing.T, c *Counters, transport, what string, want float64) {
	t.Helper()
	if n := count(t, c.HeldBack, transport, what); n != want {
		t.Errorf("held back %ss: %v, want %v", what, n, want)
	}
}

func exact(n int64) func() int64 { return func() int64 { return n } }

// A session's backlog holds at most SessionResults results: a call that
// starts past it is refused (and counted), until a write reaches the
// client.
func TestBacklogBoundsResults(t *testing.T) {
	c := NewCounters()
	d := NewDeliveries(c)
	d.SetLimits(DeliveryLimits{SessionResults: 2})
	st := d.Open(new(Backlog), "alice", "sse", nil)
	defer st.Close()
	for i := range 2 {
		if err := st.Admit(); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if err := st.Finish(100, exact(100)); err != nil {
			t.Fatalf("result %d: %v", i+1, err)
		}
	}
	if got := d.WaitingBytes(); got != 200 {
		t.Errorf("%d bytes waiting, want 200", got)
	}
	err := st.Admit()
	if !errors.Is(err, ErrBacklog) || !strings.Contains(err.Error(), "session_pending_results 2") {
		t.Errorf("a third call with two results waiting: %v, want ErrBacklog naming session_pending_results", err)
	}
	wantHeldBack(t, c, "sse", "call", 1)
	st.Wrote(100)
	if err := st.Admit(); err != nil {
		t.Errorf("a call once a result was written: %v", err)
	}
	st.Close()
	if got := d.WaitingBytes(); got != 0 {
		t.Errorf("%d bytes waiting once the stream closed, want 0", got)
	}
}

// A result always goes out when none waits, however large; one that finds
// results waiting and no room is dropped with an error saying why, and the
// session takes no call until something is written. The bytes of one
// client's sessions count together.
func TestResultsWithoutRoomAreDropped(t *testing.T) {
	c := NewCounters()
	d := NewDeliveries(c)
	d.SetLimits(DeliveryLimits{SessionBytes: 1000, ClientBytes: 1500})
	a := d.Open(new(Backlog), "alice", "streamable", nil)
	defer a.Close()
	b := d.Open(new(Backlog), "alice", "streamable", nil)
	defer b.Close()
	for _, st := range []*Stream{a, a, b} {
		_ = st.Admit()
	}
	if err := a.Finish(5000, exact(5000)); err != nil {
		t.Fatalf("the first result, none waiting: %v", err)
	}
	measured := false
	err := a.Finish(10, func() int64 { measured = true; return 10 })
	if !errors.Is(err, ErrBacklog) || !strings.Contains(err.Error(), "session_pending_bytes") || !measured {
		t.Errorf("a result behind 5000 bytes in a session of 1000: %v (measured %v), want it dropped, naming session_pending_bytes", err, measured)
	}
	if err := a.BackedUp(); !errors.Is(err, ErrBacklog) {
		t.Errorf("the session after a dropped result: %v, want backed up", err)
	}
	if err := b.Finish(10, exact(10)); !errors.Is(err, ErrBacklog) || !strings.Contains(err.Error(), "client_pending_bytes") {
		t.Errorf("a result of alice's other session: %v, want it dropped, naming client_pending_bytes", err)
	}
	wantHeldBack(t, c, "streamable", "result", 2)
	a.Wrote(5000)
	if err := a.BackedUp(); err != nil {
		t.Errorf("the session once its result was written: %v", err)
	}
}

// A stream whose write missed its deadline is closed once (onStall), is
// counted, and takes no more calls or results.
func TestStall(t *testing.T) {
	c := NewCounters()
	d := NewDeliveries(c)
	stalls := 0
	st := d.Open(new(Backlog), "bob", "sse", func() { stalls++ })
	defer st.Close()
	st.Stall(true)
	st.Stall(true)
	if stalls != 1 || !st.Stalled() {
		t.Errorf("onStall called %d times, stalled %v; want once, true", stalls, st.Stalled())
	}
	if n := count(t, c.Stalls, "sse"); n != 1 {
		t.Errorf("stalls counted: %v, want 1", n)
	}
	if err := st.Admit(); !errors.Is(err, ErrStalled) {
		t.Errorf("a call on a stalled stream: %v, want ErrStalled", err)
	}
	select {
	case <-st.Changed():
	default:
		t.Error("a stall does not wake a reader waiting for room")
	}
}

// Request bytes are refused past a client's share and past the total, and
// counted under the limit that refused them; given back, they make room.
func TestRequestBytes(t *testing.T) {
	c := NewCounters()
	b := NewRequestBytes(c)
	b.SetLimits(RequestLimits{ClientMaxBytes: 10, MaxBytes: 15})
	a1, err := b.Reserve("alice", 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("alice", 5); !errors.Is(err, ErrRequestBytes) || !strings.Contains(err.Error(), "client_max_request_bytes") {
		t.Errorf("alice past her share: %v", err)
	}
	if _, err := b.Reserve("bob", 6); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("carol", 4); !errors.Is(err, ErrRequestBytes) || !strings.Contains(err.Error(), "(max_request_bytes)") {
		t.Errorf("past the total: %v", err)
	}
	for limit, want := range map[string]float64{"client_max_request_bytes": 1, "max_request_bytes": 1} {
		if n := count(t, c.Refused, limit); n != want {
			t.Errorf("refused by %s: %v, want %v", limit, n, want)
		}
	}
	a1()
	a1() // once only
	if got := b.Held(); got != 6 {
		t.Errorf("%d bytes held, want bob's 6", got)
	}
	if _, err := b.Reserve("carol", 4); err != nil {
		t.Errorf("carol once alice's bytes were given back: %v", err)
	}
}

// Wait holds a reader (stdio's) while its client's calls hold its share,
// and lets it go once they give bytes back.
func TestRequestBytesWait(t *testing.T) {
	b := NewRequestBytes(NewCounters())
	b.SetLimits(RequestLimits{ClientMaxBytes: 10})
	release := b.Force("local", 9)
	waited := make(chan bool, 1)
	go func() {
		w, err := b.Wait(context.Background(), "local", 5)
		if err != nil {
			t.Error(err)
		}
		waited <- w
	}()
	for b.Waiting() != 1 {
		time.Sleep(time.Millisecond) // until the reader waits: what Waiting is for
	}
	release()
	if !<-waited {
		t.Error("Wait says it did not wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer b.Force("local", 9)()
	cancel()
	if _, err := b.Wait(ctx, "local", 5); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with its context ended: %v", err)
	}
}

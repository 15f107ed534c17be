package supervisor

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestStopper drives a stopper as conn.run's loop does, for a worker that
// never stops: it is interrupted when the call is stopped, again while the
// call goes on, and killed once the grace is over; the call's host
// requests are cut short once, and the Watcher hears why.
func TestStopper(t *testing.T) {
	t.Parallel()
	const limit, grace = 50 * time.Millisecond, 350 * time.Millisecond
	for _, tc := range []struct {
		name        string
		cancel      bool // the call's context ends first
		wantStopped string
		wantNotices []Notice
	}{{
		name:        "time limit",
		wantStopped: "the call exceeded its time limit of 50ms",
		wantNotices: []Notice{
			{Text: "the call reached its time limit of 50ms; interrupting it"},
			{Severe: true, Text: "the call did not stop within 350ms of the interrupt; its worker is killed and replaced"},
		},
	}, {
		// The time limit passes during the grace: no second stop.
		name:        "cancelled",
		cancel:      true,
		wantStopped: "the call was cancelled",
		wantNotices: []Notice{
			{Severe: true, Text: "the call did not stop within 350ms of the interrupt; its worker is killed and replaced"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			w := &noticeLog{}
			req := &stubRequests{}
			interrupts := 0
			var killed retirement
			began := time.Now()
			st := newStopper(ctx, limit, grace, func() { interrupts++ }, func(r retirement) { killed = r }, newTranscript(1<<10, w), req)
			defer st.close()
			for !killed.given() {
				select {
				case <-st.deadline.C:
					st.timeUp()
				case <-st.done:
					st.cancelled()
				case <-st.repeat:
					st.again()
				case <-st.grace:
					st.outOfGrace()
				}
			}
			took := time.Since(began)

			if st.stopped != tc.wantStopped {
				t.Errorf("stopped %q, want %q", st.stopped, tc.wantStopped)
			}
			if want := (retirement{RestartInterrupt, "it did not stop after an interrupt"}); killed != want {
				t.Errorf("killed for %v, want %v", killed, want)
			}
			wantMin, wantMax := grace, limit+grace+5*time.Second
			if !tc.cancel {
				wantMin += limit
			}
			if took < wantMin || took > wantMax {
				t.Errorf("killed after %s, want %s to %s", took, wantMin, wantMax)
			}
			// The first interrupt, and at least one again within the grace.
			if interrupts < 2 {
				t.Errorf("%d interrupts, want 2 or more", interrupts)
			}
			if req.stops != 1 {
				t.Errorf("host requests stopped %d times, want once", req.stops)
			}
			if !slices.Equal(w.notices, tc.wantNotices) {
				t.Errorf("notices %+v, want %+v", w.notices, tc.wantNotices)
			}
		})
	}
}

// noticeLog is a Watcher that keeps the notices.
type noticeLog struct{ notices []Notice }

func (*noticeLog) Output(Chunk)      {}
func (*noticeLog) Package(string)    {}
func (*noticeLog) Queued(func() int) {}
func (*noticeLog) Started(string)    {}
func (w *noticeLog) Notice(n Notice) { w.notices = append(w.notices, n) }

// stubRequests is a hostRequests that counts its stops.
type stubRequests struct{ stops int }

func (*stubRequests) start(event) *fault                  { return nil }
func (*stubRequests) answers() <-chan hostAnswer          { return nil }
func (*stubRequests) took(hostAnswer, bool) *fault        { return nil }
func (r *stubRequests) stop()                             { r.stops++ }
func (*stubRequests) finish(retire retirement) retirement { return retire }

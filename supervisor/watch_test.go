package supervisor_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// watcher records what a Watcher is told about one call.
type watcher struct {
	mu       sync.Mutex
	output   []supervisor.Chunk
	position func() int
	queued   int // Queued calls
	started  string
	order    []string // "queued", "started" in the order they came
	notices  []supervisor.Notice
}

func (w *watcher) Output(c supervisor.Chunk) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.output = append(w.output, c)
}

func (w *watcher) Package(string) {}

func (w *watcher) Queued(position func() int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.position, w.queued = position, w.queued+1
	w.order = append(w.order, "queued")
}

func (w *watcher) Started(worker string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = worker
	w.order = append(w.order, "started")
}

func (w *watcher) Notice(n supervisor.Notice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notices = append(w.notices, n)
}

// place is the call's place in line, -1 before it was queued.
func (w *watcher) place() int {
	w.mu.Lock()
	pos := w.position
	w.mu.Unlock()
	if pos == nil {
		return -1
	}
	return pos()
}

func (w *watcher) snapshot() (order []string, started string, notices []supervisor.Notice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.order...), w.started, append([]supervisor.Notice(nil), w.notices...)
}

func TestWatcherFollowsTheLine(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 1})
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "warm", Code: "0s"}, nil); err != nil {
		t.Fatal(err)
	}
	hold := &watcher{}
	held := make(chan error, 1)
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "hold", Code: "600ms"}, hold)
		held <- err
	}()
	supervisor.WaitUntil(t, func() bool { _, started, _ := hold.snapshot(); return started != "" })
	if order, started, _ := hold.snapshot(); len(order) != 1 || started != "worker-1" {
		t.Errorf("a call that found a free worker was told %v, worker %q; want only started, on worker-1", order, started)
	}

	first, second := &watcher{}, &watcher{}
	done := make(chan error, 2)
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "first", Code: "0s"}, first)
		done <- err
	}()
	supervisor.WaitUntil(t, func() bool { return first.place() == 1 })
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "second", Code: "300ms"}, second)
		done <- err
	}()
	supervisor.WaitUntil(t, func() bool { return second.place() == 2 })
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// The worker goes to the first in line; the second moves up.
	supervisor.WaitUntil(t, func() bool { return first.place() == 0 && second.place() == 1 })
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for name, w := range map[string]*watcher{"first": first, "second": second} {
		order, started, _ := w.snapshot()
		if strings.Join(order, ",") != "queued,started" || started != "worker-1" {
			t.Errorf("%s was told %v on %q; want queued, started on worker-1", name, order, started)
		}
		if pos := w.place(); pos != 0 {
			t.Errorf("%s: place in line %d after it ran, want 0", name, pos)
		}
	}
}

func TestWatcherHearsNotices(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode string
		cfg  supervisor.Config
		job  supervisor.Job
		want []supervisor.Notice // Text: a word the notice must hold
	}{
		{
			name: "interrupt, then kill", mode: "hang",
			cfg: supervisor.Config{Workers: 1, InterruptGrace: 200 * time.Millisecond},
			job: supervisor.Job{Timeout: 300 * time.Millisecond},
			want: []supervisor.Notice{
				{Severe: false, Text: "time limit of 300ms; interrupting"},
				{Severe: true, Text: "killed and replaced"},
			},
		},
		{
			name: "crash", mode: "die-mid-call", cfg: supervisor.Config{Workers: 1},
			want: []supervisor.Notice{{Severe: true, Text: "died while running the call (exit status 9)"}},
		},
		{
			name: "output cut", mode: "flood", cfg: supervisor.Config{Workers: 1, MaxOutput: 1500},
			want: []supervisor.Notice{{Severe: false, Text: "stdout exceeded the limit of 1500 bytes (max_output)"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fakePool(t, tc.mode, tc.cfg)
			w := &watcher{}
			tc.job.ID, tc.job.Code = "1", "1"
			if _, err := p.Run(t.Context(), tc.job, w); err != nil {
				t.Fatal(err)
			}
			_, _, got := w.snapshot()
			if len(got) != len(tc.want) {
				t.Fatalf("notices %+v, want %d like %+v", got, len(tc.want), tc.want)
			}
			for i := range got {
				if got[i].Severe != tc.want[i].Severe || !strings.Contains(got[i].Text, tc.want[i].Text) {
					t.Errorf("notice %d is %+v, want severe=%v with %q", i, got[i], tc.want[i].Severe, tc.want[i].Text)
				}
			}
		})
	}
}

func TestCancelledCallNeverStartsOnAFreeWorker(t *testing.T) {
	log := t.TempDir() + "/runs"
	p := fakePool(t, "echo", supervisor.Config{Workers: 1}, "PYRUN_FAKE_LOG="+log)
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w := &watcher{}
	if _, err := p.Run(ctx, supervisor.Job{ID: "never", Code: "never-ran"}, w); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v, want context.Canceled", err)
	}
	if order, _, _ := w.snapshot(); len(order) != 0 {
		t.Errorf("the watcher was told %v; want nothing", order)
	}
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "after", Code: "after"}, nil); err != nil {
		t.Fatal(err)
	}
	runs, _ := os.ReadFile(log)
	if strings.Contains(string(runs), "never-ran") {
		t.Errorf("the cancelled call ran: %q", runs)
	}
	if c := p.Stats().Counts; c.Calls["cancelled"] != 1 || c.Rejected != 0 {
		t.Errorf("counts %+v; want one cancelled call and none rejected", c)
	}
}

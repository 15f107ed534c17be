package supervisor_test

import (
	"errors"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Workers belong to one client (docs/architecture.md, Workers belong to a
// client), shown on fake workers that answer each call with its code.

// runAs runs code as client and returns the worker it ran on.
func runAs(t *testing.T, p *supervisor.Pool, client, code string) string {
	t.Helper()
	res, err := p.Run(t.Context(), supervisor.Job{ID: client + "-" + code, Code: code, Client: client}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("call of %s: %v %+v", client, err, res)
	}
	return res.Worker
}

// burst runs n calls of code as client at once and returns the workers
// they ran on, and when each ended.
func burst(t *testing.T, p *supervisor.Pool, client, code string, n int) ([]string, []time.Time) {
	t.Helper()
	workers := make([]string, n)
	ends := make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := p.Run(t.Context(), supervisor.Job{ID: client, Code: code, Client: client}, nil)
			if err != nil || res.Status != supervisor.StatusSuccess {
				t.Errorf("call of %s: %v %+v", client, err, res)
			}
			workers[i], ends[i] = res.Worker, time.Now()
		})
	}
	wg.Wait()
	return workers, ends
}

// A worker that ran a call of one client never runs another's, however
// the calls of two clients interleave, one at a time or at once; each
// client's own calls reuse its worker.
func TestWorkersAreNeverSharedBetweenClients(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 2})
	ran := map[string]string{} // worker: its client
	note := func(client string, workers ...string) {
		for _, w := range workers {
			if c, ok := ran[w]; ok && c != client {
				t.Fatalf("worker %s ran calls of %s and of %s", w, c, client)
			}
			ran[w] = client
		}
	}
	a := runAs(t, p, "alice", "1")
	note("alice", a)
	for i := range 5 {
		note("bob", runAs(t, p, "bob", "2"))
		if w := runAs(t, p, "alice", "3"); w != a {
			t.Errorf("alice's call %d ran on %s, not on her worker %s", i, w, a)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range []string{"alice", "bob", ""} {
		wg.Go(func() {
			ws, _ := burst(t, p, c, "50ms", 4)
			mu.Lock()
			defer mu.Unlock()
			note(c, ws...)
		})
	}
	wg.Wait()
	s := p.Stats()
	owned := 0
	for _, c := range s.Clients {
		owned += c.Idle + c.Busy
	}
	if len(s.Clients) < 2 || owned > 2 {
		t.Errorf("Stats().Clients = %v, want two clients' workers, at most the pool's size together", s.Clients)
	}
}

// A client alone may own every worker of the pool, as calls did before
// workers had owners; with another client about, it owns at most
// --client-max-workers (half the pool by default), and the others wait
// for its own workers.
func TestClientMaxWorkers(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 4})
	WaitUntilFresh(t, p, 4)
	alone, _ := burst(t, p, "alice", "300ms", 4)
	if n := distinct(alone); n != 4 {
		t.Errorf("alice alone ran 4 calls at once on %d workers (%v), want 4", n, alone)
	}
	q := fakePool(t, "echo", supervisor.Config{Workers: 4})
	WaitUntilFresh(t, q, 4)
	runAs(t, q, "bob", "1")
	shared, _ := burst(t, q, "alice", "300ms", 4)
	if n := distinct(shared); n != 2 {
		t.Errorf("alice ran 4 calls at once beside bob on %d workers (%v), want 2 (the default cap)", n, shared)
	}
	r := fakePool(t, "echo", supervisor.Config{Workers: 4, ClientMaxWorkers: 1})
	runAs(t, r, "bob", "1")
	one, _ := burst(t, r, "alice", "100ms", 3)
	if n := distinct(one); n != 1 {
		t.Errorf("with --client-max-workers 1 alice ran on %d workers (%v), want 1", n, one)
	}
}

// A client's worker left unused for --client-worker-idle is retired; the
// client's next call takes a fresh worker.
func TestClientWorkerIdleRetires(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 2, ClientWorkerIdle: 300 * time.Millisecond})
	first := runAs(t, p, "alice", "1")
	supervisor.WaitUntil(t, func() bool {
		s := p.Stats()
		return len(s.Clients) == 0 && s.Counts.Restarts[supervisor.RestartClient] == 1
	})
	if again := runAs(t, p, "alice", "1"); again == first {
		t.Errorf("alice's call ran on her retired worker %s", first)
	}
}

// One client's burst keeps every worker it may own busy and more calls in
// line; another client's first call does not wait behind them: it gets a
// fresh worker as soon as one of the first client's is freed (which is
// retired, the first client holding more than its share).
func TestOneClientsBurstDoesNotStarveAnothersFirstCall(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 2})
	WaitUntilFresh(t, p, 2)
	var aliceEnds []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, aliceEnds = burst(t, p, "alice", "400ms", 6)
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Queued == 4 })
	res, err := p.Run(t.Context(), supervisor.Job{ID: "bob", Code: "1", Client: "bob"}, nil)
	bobEnd := time.Now()
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("bob's call: %v %+v", err, res)
	}
	<-done
	later := 0
	for _, e := range aliceEnds {
		if e.After(bobEnd) {
			later++
		}
	}
	if later < 2 {
		t.Errorf("bob's call ended after all but %d of alice's 6 calls: it waited behind her burst", later)
	}
	if s := p.Stats(); s.Counts.Restarts[supervisor.RestartClient] == 0 {
		t.Errorf("restarts %v: want one of alice's workers retired for bob", s.Counts.Restarts)
	}
}

// Two clients each with a burst share the pool: fresh workers go round
// them, and both get their share.
func TestClientsShareThePoolUnderLoad(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 4})
	WaitUntilFresh(t, p, 4)
	var wg sync.WaitGroup
	got := map[string][]string{}
	var mu sync.Mutex
	for _, c := range []string{"alice", "bob"} {
		wg.Go(func() {
			ws, _ := burst(t, p, c, "200ms", 6)
			mu.Lock()
			got[c] = ws
			mu.Unlock()
		})
	}
	wg.Wait()
	for c, ws := range got {
		if n := distinct(ws); n < 2 {
			t.Errorf("%s ran on %d workers (%v), want its share of 2", c, n, ws)
		}
	}
}

func distinct(ws []string) int {
	seen := map[string]bool{}
	for _, w := range ws {
		seen[w] = true
	}
	return len(seen)
}

// WaitUntilFresh waits until p has n never-used workers idle.
func WaitUntilFresh(t *testing.T, p *supervisor.Pool, n int) {
	t.Helper()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Fresh >= n })
}

// While workers cannot start, a client with no worker of its own gets
// ErrNoWorkers at once, though another client's worker is alive: that one
// is not its to take.
func TestClientWithoutWorkerFailsFastWhenStartsFail(t *testing.T) {
	var mu sync.Mutex
	starts := 0
	newCmd := func(cfg supervisor.Config) (*exec.Cmd, error) {
		mu.Lock()
		defer mu.Unlock()
		starts++
		if starts == 1 {
			return fakeCommand("echo")(cfg)
		}
		return fakeCommand("crash-on-start")(cfg)
	}
	p := supervisor.NewPoolWithCommand(newCmd, supervisor.Config{Workers: 1, QueueTimeout: time.Minute}, testLogger(t))
	supervisor.CloseAtEnd(t, p)
	runAs(t, p, "alice", "1")
	supervisor.WaitUntil(t, func() bool { return p.Stats().StartError != "" })
	began := time.Now()
	_, err := p.Run(t.Context(), supervisor.Job{ID: "bob", Code: "1", Client: "bob"}, nil)
	if !errors.Is(err, supervisor.ErrNoWorkers) {
		t.Fatalf("bob's call: %v, want ErrNoWorkers", err)
	}
	within(t, "failing bob's call", time.Since(began), 0, 10*time.Second)
	runAs(t, p, "alice", "2") // alice still has hers
}

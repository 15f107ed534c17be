package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// These tests run real Deno + Pyodide workers: sessions on workers a real
// pool starts for them.

func testLogger(t *testing.T) hclog.Logger { return testlog.New(t) }

// manager is a Manager on a one-worker pool, closed with the test.
func manager(t *testing.T, limits sessions.Limits) (*sessions.Manager, *supervisor.Pool) {
	t.Helper()
	return managerOn(t, limits, 0)
}

// managerOn is manager with Options.PerHost perHost: 0 gives each session
// a worker of its own.
func managerOn(t *testing.T, limits sessions.Limits, perHost int) (*sessions.Manager, *supervisor.Pool) {
	t.Helper()
	return engineManagerOn(t, supervisor.Python, limits, perHost)
}

// engineManagerOn is managerOn with sessions of engine e.
func engineManagerOn(t *testing.T, e supervisor.Engine, limits sessions.Limits, perHost int) (*sessions.Manager, *supervisor.Pool) {
	t.Helper()
	log := testLogger(t)
	// webR starts in seconds on a quiet machine, past a minute on a loaded one.
	pool, err := supervisor.NewEnginePool(testruntime.Get(t), e, supervisor.Config{Workers: 1, InterruptGrace: 300 * time.Millisecond,
		StartTimeout: 4 * time.Minute}, log)
	if err != nil {
		t.Fatal(err)
	}
	m := sessions.New(sessions.Options{
		Instance: "test-1",
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		},
		Limits:    limits,
		Anonymous: "anonymous",
		Log:       log,
		PerHost:   perHost,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Close(ctx)
		if err := pool.Close(ctx); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return m, pool
}

func call(t *testing.T, m *sessions.Manager, id, code string) supervisor.Result {
	t.Helper()
	res, err := m.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: code, Code: code, Client: "anonymous"}}, nil)
	if err != nil {
		t.Fatalf("call %q in %s: %v", code, id, err)
	}
	return res
}

// wantRefusal runs c and wants it refused with an error that is want.
func wantRefusal(t *testing.T, m *sessions.Manager, c sessions.Call, want error, what string) {
	t.Helper()
	if _, err := m.Run(t.Context(), c, nil); !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestCloseDrainsThenKills: Close lets a running call finish within its
// context, then kills it; either way every session ends and its worker
// stops before Close returns.
func TestCloseDrainsThenKills(t *testing.T) {
	m, _ := manager(t, sessions.Limits{})
	quick := call(t, m, "new", "x = 1").SessionID
	stuck := call(t, m, "new", "y = 1").SessionID

	done := make(chan supervisor.Result, 1)
	go func() {
		// Ignores interrupts: only a kill ends it.
		res, _ := m.Run(context.Background(), sessions.Call{Session: stuck, Job: supervisor.Job{
			ID: "stuck", Client: "anonymous",
			Code: "import time, js\njs.console.error('stuck call running')\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass",
		}}, nil)
		done <- res
	}()
	waitRunning(t, m, stuck, "1")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err := m.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a call that never ends: %v, want the deadline", err)
	}
	if took := time.Since(began); took < time.Second || took > 20*time.Second {
		t.Errorf("Close took %v, want its 1s drain and a kill", took)
	}
	if res := <-done; res.Status != supervisor.StatusCrashed && res.Status != supervisor.StatusTimeout {
		t.Errorf("the killed call: %s %s", res.Status, res.Error)
	}
	st := m.Stats()
	if st.Open != 0 || st.Ends[sessions.EndShutdown]+st.Ends[sessions.EndLost] != 2 {
		t.Errorf("after Close: %d open, ends %v; want both ended", st.Open, st.Ends)
	}
	if _, err := m.Run(t.Context(), sessions.Call{Session: quick, Job: supervisor.Job{ID: "late", Code: "x", Client: "anonymous"}}, nil); !errors.Is(err, sessions.ErrClosed) && !errors.Is(err, sessions.ErrUnknown) {
		t.Errorf("a call after Close: %v", err)
	}
	wantRefusal(t, m, sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "new", Code: "1", Client: "anonymous"}}, sessions.ErrClosed, "a new session after Close")
}

// waitRunning waits until a call to id is running: until a probe running
// code queues behind it and gives up (a probe that finds the session free
// runs, and the next one is sent). It returns how many probes ran.
func waitRunning(t *testing.T, m *sessions.Manager, id, code string) int {
	t.Helper()
	for ran := 0; ; ran++ {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err := m.Run(ctx, sessions.Call{Session: id, Job: supervisor.Job{ID: "probe", Code: code, Client: "anonymous"}}, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return ran // it waited its turn: the session's call is running
		}
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
	}
}

// TestCancelledWaiterLeavesTheLine: a call that gives up while waiting for
// its session's turn does not run, and the calls behind it still do, in
// order.
func TestCancelledWaiterLeavesTheLine(t *testing.T) {
	m, _ := manager(t, sessions.Limits{})
	id := call(t, m, "new", "seen = []\nimport asyncio").SessionID
	first := make(chan error, 1)
	go func() {
		_, err := m.Run(context.Background(), sessions.Call{Session: id, Job: supervisor.Job{
			ID: "first", Client: "anonymous", Code: "seen.append('first')\nawait asyncio.sleep(1)"}}, nil)
		first <- err
	}()
	ran := waitRunning(t, m, id, "seen.append('probe')")
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	res := call(t, m, id, "seen.count('probe'), seen.count('first')")
	if want := fmt.Sprintf("[\n  %d,\n  1\n]", ran); res.Value != want {
		t.Errorf("%d probes ran before the first call, and one gave up in line: seen %s, want %s", ran, res.Value, want)
	}
}

// TestOwnership: a session belongs to its client.
func TestOwnership(t *testing.T) {
	m, _ := manager(t, sessions.Limits{ClientMax: 1})
	res, err := m.Run(t.Context(), sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "1", Code: "s = 'alice'", Client: "alice"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, m, sessions.Call{Session: res.SessionID, Job: supervisor.Job{ID: "2", Code: "s", Client: "bob"}}, sessions.ErrUnknown, "bob in alice's session")
	wantRefusal(t, m, sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "3", Code: "1", Client: "alice"}}, sessions.ErrTooMany, "alice's second session with ClientMax 1")
	res2, err := m.Run(t.Context(), sessions.Call{Session: res.SessionID, End: true, Job: supervisor.Job{ID: "4", Client: "alice"}}, nil)
	if err != nil || res2.Status != supervisor.StatusSuccess {
		t.Fatalf("ending alice's session without code: %v %v", res2.Status, err)
	}
	wantRefusal(t, m, sessions.Call{Session: res.SessionID, Job: supervisor.Job{ID: "5", Code: "s", Client: "alice"}}, sessions.ErrEnded, "alice in her ended session")
	wantRefusal(t, m, sessions.Call{Session: res.SessionID, Job: supervisor.Job{ID: "6", Code: "s", Client: "bob"}}, sessions.ErrUnknown, "bob in alice's ended session")
}

func TestInstanceNames(t *testing.T) {
	for _, ok := range []string{"a", "box-1", "Web-01", strings.Repeat("x", 63)} {
		if err := sessions.ValidInstance(ok); err != nil {
			t.Errorf("ValidInstance(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "ü", strings.Repeat("x", 64)} {
		if err := sessions.ValidInstance(bad); err == nil {
			t.Errorf("ValidInstance(%q) accepted it", bad)
		}
	}
	if err := sessions.ValidInstance(sessions.DefaultInstance()); err != nil {
		t.Errorf("the default instance name %q: %v", sessions.DefaultInstance(), err)
	}
}

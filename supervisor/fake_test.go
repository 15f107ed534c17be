package supervisor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/supervisor"
)

// The test binary doubles as a misbehaving worker: with PYRUN_FAKE_WORKER
// set, TestMain runs one of these modes instead of the tests. Each mode is a
// way a real worker can fail; well-behaved workers are tested with the real
// Deno worker (pool_test.go).
var fakeModes = map[string]func(){
	"crash-on-start": func() {
		fmt.Fprintln(os.Stderr, "fake: cannot start: no pyodide here")
		os.Exit(3)
	},
	"never-ready": func() {
		blockForever() // killed by the start deadline
	},
	"wrong-protocol": func() {
		fakeSend(map[string]any{"type": "ready", "protocol": 99})
		fakeServe(func(map[string]any) {})
	},
	"wrong-engine": func() {
		fakeSend(map[string]any{"type": "ready", "engine": "r", "protocol": supervisor.ProtocolVersion})
		fakeServe(func(map[string]any) {})
	},
	"garbage-mid-call": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": "before\n"})
			os.Stdout.WriteString("this is not json\n")
		})
	},
	"recycle-on-idle": func() {
		// A worker that settles (the R worker) and says, once it has
		// cleaned up, that it could not set its state back.
		fakeSend(map[string]any{"type": "ready", "engine": "python", "protocol": supervisor.ProtocolVersion, "settles": true})
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "result", "id": req["id"], "status": "success", "value": "1"})
			fakeSend(map[string]any{"type": "idle", "id": req["id"], "recycle": "the call changed R in a way pyrun cannot undo: a test"})
		})
	},
	"wrong-id": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "result", "id": "someone-else", "status": "success"})
		})
	},
	"endless-line": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			chunk := strings.Repeat("x", 1<<16)
			for {
				if _, err := os.Stdout.WriteString(chunk); err != nil {
					os.Exit(1)
				}
			}
		})
	},
	"die-mid-call": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": "partial output\n"})
			fmt.Fprintln(os.Stderr, "fake: dying now")
			os.Exit(9)
		})
	},
	"hang": func() {
		signal.Ignore(supervisor.InterruptSignal, syscall.SIGTERM)
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": "started\n"})
			blockForever()
		})
	},
	"ignore-eof": func() {
		signal.Ignore(syscall.SIGTERM)
		fakeReady()
		fakeServe(fakeEcho)
		blockForever() // stdin closed: a real worker exits here; this one does not
	},
	"flood": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			for range 3 {
				fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": strings.Repeat("z", 999) + "\n"})
			}
			fakeSend(map[string]any{"type": "result", "id": req["id"], "status": "success"})
		})
	},
	// "echo" answers every run with success and the code as its value; it
	// records each run in PYRUN_FAKE_LOG so tests can see which calls ran.
	"echo": func() {
		fakeReady()
		fakeServe(fakeEcho)
	},
	// "echo-request" answers every run with the request itself as its value.
	"echo-request": func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			b, _ := json.Marshal(req)
			fakeSend(map[string]any{"type": "result", "id": req["id"], "status": "success", "value": string(b)})
		})
	},
}

// fakeEcho answers a run with success and the code as its value, after
// sleeping for the code when it is a duration ("500ms").
func fakeEcho(req map[string]any) {
	if path := os.Getenv("PYRUN_FAKE_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, req["code"])
			f.Close()
		}
	}
	if d, err := time.ParseDuration(fmt.Sprint(req["code"])); err == nil {
		time.Sleep(d)
	}
	v, _ := json.Marshal(req["code"])
	fakeSend(map[string]any{"type": "result", "id": req["id"], "status": "success", "value": string(v)})
}

func TestMain(m *testing.M) {
	if mode := os.Getenv("PYRUN_FAKE_WORKER"); mode != "" {
		run, ok := fakeModes[mode]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown fake worker mode %q\n", mode)
			os.Exit(2)
		}
		run()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// blockForever blocks the fake worker until it is killed. A bare select {}
// would not do: with nothing else to wake it, Go's runtime reports a
// deadlock and exits.
func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func fakeSend(v map[string]any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func fakeReady() {
	engine := os.Getenv("PYRUN_FAKE_ENGINE")
	if engine == "" {
		engine = "python"
	}
	fakeSend(map[string]any{"type": "ready", "engine": engine, "protocol": supervisor.ProtocolVersion, "pyodide": "fake", "python": "fake"})
}

// fakeServe calls handle for every run request until stdin ends.
func fakeServe(handle func(map[string]any)) {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req map[string]any
		if json.Unmarshal(sc.Bytes(), &req) == nil && req["type"] == "run" {
			handle(req)
		}
	}
}

// fakeCommand returns a command factory that starts the test binary in mode.
func fakeCommand(mode string, env ...string) func(supervisor.Config) (*exec.Cmd, error) {
	return func(supervisor.Config) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append([]string{"PYRUN_FAKE_WORKER=" + mode}, env...)
		return cmd, nil
	}
}

func testLogger(t *testing.T) hclog.Logger { return testlog.New(t) }

func fakePool(t *testing.T, mode string, cfg supervisor.Config, env ...string) *supervisor.Pool {
	t.Helper()
	p := supervisor.NewPoolWithCommand(fakeCommand(mode, env...), cfg, testLogger(t))
	supervisor.CloseAtEnd(t, p)
	return p
}

func within(t *testing.T, what string, got, wantMin, wantMax time.Duration) {
	t.Helper()
	if got < wantMin || got > wantMax {
		t.Errorf("%s took %s, want between %s and %s", what, got, wantMin, wantMax)
	}
}

func TestWorkerCrashingOnStartFailsCallsFast(t *testing.T) {
	p := fakePool(t, "crash-on-start", supervisor.Config{Workers: 2})
	start := time.Now()
	_, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil)
	if !errors.Is(err, supervisor.ErrNoWorkers) {
		t.Fatalf("Run error = %v, want ErrNoWorkers", err)
	}
	within(t, "failing the call", time.Since(start), 0, 5*time.Second)
	if !strings.Contains(err.Error(), "no pyodide here") {
		t.Errorf("error %q does not carry the worker's stderr", err)
	}
	if s := p.Stats(); !strings.Contains(s.StartError, "exit status 3") {
		t.Errorf("Stats().StartError = %q, want the exit status", s.StartError)
	}
}

func TestWorkerNeverReadyIsKilledAtStartDeadline(t *testing.T) {
	p := fakePool(t, "never-ready", supervisor.Config{Workers: 1, StartTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil)
	if !errors.Is(err, supervisor.ErrNoWorkers) || !strings.Contains(err.Error(), "not ready after 300ms") {
		t.Fatalf("Run error = %v, want ErrNoWorkers: not ready", err)
	}
	within(t, "failing the call", time.Since(start), 500*time.Millisecond, 5*time.Second)
}

func TestWorkerWithWrongProtocolIsRefused(t *testing.T) {
	p := fakePool(t, "wrong-protocol", supervisor.Config{Workers: 1})
	_, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "protocol 99") {
		t.Fatalf("Run error = %v, want a protocol version error", err)
	}
}

func TestWorkerOfAnotherEngineIsRefused(t *testing.T) {
	p := fakePool(t, "wrong-engine", supervisor.Config{Workers: 1})
	_, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil)
	if !errors.Is(err, supervisor.ErrNoWorkers) || !strings.Contains(err.Error(), `engine "r", pyrun started it as "python"`) {
		t.Fatalf("Run error = %v, want ErrNoWorkers: another engine", err)
	}
}

func TestWorkerBreakingProtocolIsRetired(t *testing.T) {
	for _, tc := range []struct{ mode, want string }{
		{"garbage-mid-call", "broke the protocol"},
		{"wrong-id", "someone-else"},
		{"endless-line", "longer than"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p := fakePool(t, tc.mode, supervisor.Config{Workers: 1, MaxOutput: 1 << 10})
			for i := range 2 {
				res, err := p.Run(t.Context(), supervisor.Job{ID: fmt.Sprint(i), Code: "1"}, nil)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if res.Status != supervisor.StatusCrashed || !strings.Contains(res.Error, tc.want) {
					t.Errorf("call %d: status %s, error %q; want crashed mentioning %q", i, res.Status, res.Error, tc.want)
				}
			}
			if s := p.Stats(); s.Counts.Restarts[supervisor.RestartProtocol] < 2 {
				t.Errorf("restarts = %v, want 2 for the protocol", s.Counts.Restarts)
			}
		})
	}
}

func TestWorkerDyingMidCallKeepsOutput(t *testing.T) {
	p := fakePool(t, "die-mid-call", supervisor.Config{Workers: 1})
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != supervisor.StatusCrashed || res.Status.ExitCode() != 137 {
		t.Errorf("status = %s (exit %d), want crashed (137)", res.Status, res.Status.ExitCode())
	}
	if res.Stdout != "partial output\n" {
		t.Errorf("stdout = %q, want the output written before the crash", res.Stdout)
	}
	for _, want := range []string{"exit status 9", "fake: dying now"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q does not mention %q", res.Error, want)
		}
	}
}

func TestHungWorkerIsKilledAfterGrace(t *testing.T) {
	p := fakePool(t, "hang", supervisor.Config{Workers: 1, InterruptGrace: 200 * time.Millisecond})
	start := time.Now()
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1", Timeout: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "the timed-out call", time.Since(start), 500*time.Millisecond, 3*time.Second)
	if res.Status != supervisor.StatusTimeout || res.Stdout != "started\n" {
		t.Errorf("status %s stdout %q; want timeout with the output so far", res.Status, res.Stdout)
	}
	if !strings.Contains(res.Error, "time limit of 300ms") {
		t.Errorf("error %q does not say which limit", res.Error)
	}
	if s := p.Stats(); s.Counts.Restarts[supervisor.RestartInterrupt] != 1 {
		t.Errorf("restarts = %v, want one kill after the interrupt", s.Counts.Restarts)
	}
}

func TestCloseEscalatesToKill(t *testing.T) {
	p := supervisor.NewPoolWithCommand(fakeCommand("ignore-eof"), supervisor.Config{Workers: 1}, testLogger(t))
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "1"}, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// stdin closed (1s), SIGTERM ignored (1s), SIGKILL.
	within(t, "Close", time.Since(start), 1500*time.Millisecond, 4*time.Second)
}

func TestQueueIsBounded(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 1, MaxQueue: 1, QueueTimeout: 400 * time.Millisecond})
	// Warm the worker so that the slow call starts at once.
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "0", Code: "0s"}, nil); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "slow", Code: "1500ms"}, nil)
		slow <- err
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Busy == 1 })

	queued := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "queued", Code: "0s"}, nil)
		queued <- err
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Queued == 1 })
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "extra", Code: "0s"}, nil); !errors.Is(err, supervisor.ErrQueueFull) {
		t.Errorf("third call: %v, want ErrQueueFull", err)
	}
	if err := <-queued; !errors.Is(err, supervisor.ErrQueueTimeout) {
		t.Errorf("queued call: %v, want ErrQueueTimeout", err)
	}
	within(t, "the queue timeout", time.Since(start), 350*time.Millisecond, 1400*time.Millisecond)
	if err := <-slow; err != nil {
		t.Errorf("slow call: %v", err)
	}
	if got := p.Stats().Counts.Rejected; got != 2 {
		t.Errorf("rejected = %d, want 2", got)
	}
}

func TestCancelledQueuedCallNeverRuns(t *testing.T) {
	log := t.TempDir() + "/runs"
	p := fakePool(t, "echo", supervisor.Config{Workers: 1}, "PYRUN_FAKE_LOG="+log)
	slow := make(chan error, 1)
	go func() {
		_, err := p.Run(t.Context(), supervisor.Job{ID: "slow", Code: "500ms"}, nil)
		slow <- err
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Busy == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	queued := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx, supervisor.Job{ID: "never", Code: "never-ran"}, nil)
		queued <- err
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Queued == 1 })
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v, want context.Canceled", err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	// One more call through the same worker proves the line moved on.
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "after", Code: "after"}, nil); err != nil {
		t.Fatal(err)
	}
	runs, _ := os.ReadFile(log)
	if strings.Contains(string(runs), "never-ran") {
		t.Errorf("the cancelled call ran: %q", runs)
	}
}

func TestCloseDrainsRunningCalls(t *testing.T) {
	p := supervisor.NewPoolWithCommand(fakeCommand("echo"), supervisor.Config{Workers: 1}, testLogger(t))
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "0", Code: "0s"}, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan supervisor.Result, 1)
	go func() {
		res, _ := p.Run(context.Background(), supervisor.Job{ID: "1", Code: "700ms"}, nil)
		done <- res
	}()
	supervisor.WaitUntil(t, func() bool { return p.Stats().Busy == 1 })
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Status != supervisor.StatusSuccess {
		t.Errorf("the running call ended %s, want success", res.Status)
	}
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "2", Code: "0s"}, nil); !errors.Is(err, supervisor.ErrClosed) {
		t.Errorf("call after Close: %v, want ErrClosed", err)
	}
}

func TestReconfigureResizesThePool(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 1})
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
	if err := p.Reconfigure(supervisor.Config{Workers: 3}); err != nil {
		t.Fatal(err)
	}
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 3 })
	if err := p.Reconfigure(supervisor.Config{Workers: 1}); err != nil {
		t.Fatal(err)
	}
	supervisor.WaitUntil(t, func() bool { s := p.Stats(); return s.Ready == 1 && s.Starting == 0 })
	if s := p.Stats(); s.Counts.Restarts[supervisor.RestartShrink] != 2 {
		t.Errorf("restarts = %v, want 2 retired by the shrink", s.Counts.Restarts)
	}
}

package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/supervisor"
)

// Crash safety: a worker that dies at any moment (while starting, idle, as
// a call reaches it, mid-call, while being interrupted) or grows past its
// memory ceiling costs at most the call it was running, and the pool
// refills. These tests use the test binary as a worker (fake_test.go); the
// hostile-code suite (hostile_test.go) does the same to real workers.

func init() {
	// "one-call" answers one call, then exits without reading another.
	fakeModes["one-call"] = func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeEcho(req)
			os.Exit(0)
		})
	}
	// "die-on-read" records the call it reads, then dies without a word:
	// its code may have run, so the call must not run again elsewhere.
	fakeModes["die-on-read"] = func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeRecord(fmt.Sprint(req["code"]))
			os.Exit(5)
		})
	}
	// "crash-until" records every start and crashes while the file
	// PYRUN_FAKE_OK does not exist; then it echoes.
	fakeModes["crash-until"] = func() {
		fakeRecord("start")
		if _, err := os.Stat(os.Getenv("PYRUN_FAKE_OK")); err != nil {
			fmt.Fprintln(os.Stderr, "fake: not yet")
			os.Exit(3)
		}
		fakeReady()
		fakeServe(fakeEcho)
	}
	// "slow-start" records its pid, takes a while to become ready, then
	// echoes.
	fakeModes["slow-start"] = func() {
		fakeRecord(fmt.Sprint(os.Getpid()))
		time.Sleep(300 * time.Millisecond)
		fakeReady()
		fakeServe(fakeEcho)
	}
	// "spin" burns a CPU for the duration a call names ("spin:300ms")
	// before answering it, and forever after answering "spin-after".
	fakeModes["spin"] = func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			code := fmt.Sprint(req["code"])
			if d, err := time.ParseDuration(strings.TrimPrefix(code, "spin:")); err == nil {
				for end := time.Now().Add(d); time.Now().Before(end); {
				}
			}
			fakeEcho(map[string]any{"id": req["id"], "code": code})
			if code == "spin-after" {
				go func() {
					for {
					}
				}()
			}
		})
	}
	// "stubborn" records every SIGUSR2 and never ends a call.
	fakeModes["stubborn"] = func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, supervisor.InterruptSignal)
		go func() {
			for range sig {
				fakeRecord("interrupted")
			}
		}()
		fakeReady()
		fakeServe(func(req map[string]any) {
			fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": "started\n"})
			sleepForever()
		})
	}
	// "balloon" grows by PYRUN_FAKE_MIB MiB on the call "balloon" (and then
	// hangs), or right after answering the call "balloon-later" (idle);
	// it echoes other calls.
	fakeModes["balloon"] = func() {
		fakeReady()
		fakeServe(func(req map[string]any) {
			switch req["code"] {
			case "balloon":
				fakeSend(map[string]any{"type": "output", "id": req["id"], "stream": "stdout", "text": "allocating\n"})
				balloon()
				sleepForever()
			case "balloon-later":
				fakeEcho(req)
				balloon()
			default:
				fakeEcho(req)
			}
		})
	}
}

// noExitDelay keeps a fake worker built with -race from lingering a second
// after it exits (the race detector's default), which no real worker does.
const noExitDelay = "GORACE=atexit_sleep_ms=0"

var ballast []byte

func balloon() {
	var mib int
	fmt.Sscan(os.Getenv("PYRUN_FAKE_MIB"), &mib)
	ballast = make([]byte, mib<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// fakeRecord appends a line to PYRUN_FAKE_LOG.
func fakeRecord(line string) {
	f, err := os.OpenFile(os.Getenv("PYRUN_FAKE_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

// recorded returns the lines fake workers wrote to the log at path.
func recorded(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

func kill(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		t.Fatalf("kill worker %d: %v", pid, err)
	}
}

func restarts(s supervisor.Stats) int64 {
	var n int64
	for _, v := range s.Counts.Restarts {
		n += v
	}
	return n
}

func TestIdleWorkerDeathIsNoticedWithoutACall(t *testing.T) {
	p := fakePool(t, "echo", supervisor.Config{Workers: 1})
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
	old := p.WorkerPIDs()[0]
	kill(t, old)
	// No call is made: the pool sees the death itself and refills.
	supervisor.WaitUntil(t, func() bool {
		s := p.Stats()
		return restarts(s) == 1 && s.Ready == 1
	})
	if pids := p.WorkerPIDs(); len(pids) != 1 || pids[0] == old {
		t.Errorf("workers %v, want one new worker", pids)
	}
	if res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "after"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Errorf("call after the death: %v %+v", err, res)
	}
}

func TestCallsNeverFailOnWorkersThatDiedBeforeTakingThem(t *testing.T) {
	// Each worker takes one call and exits at once: the next call reaches
	// it idle and dead, or dying as the call is written to it. Either way
	// the call never ran there and must run on another worker.
	log := filepath.Join(t.TempDir(), "runs")
	p := fakePool(t, "one-call", supervisor.Config{Workers: 2}, "PYRUN_FAKE_LOG="+log, noExitDelay)
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Go(func() {
			for i := range 10 {
				code := fmt.Sprintf("call-%d-%d", c, i)
				res, err := p.Run(t.Context(), supervisor.Job{ID: code, Code: code}, nil)
				if err != nil || res.Status != supervisor.StatusSuccess || res.Value != `"`+code+`"` {
					t.Errorf("%s: %v, status %s, value %s, error %s", code, err, res.Status, res.Value, res.Error)
				}
			}
		})
	}
	wg.Wait()
	// Every call ran exactly once.
	runs := recorded(log)
	seen := map[string]int{}
	for _, r := range runs {
		seen[r]++
	}
	if len(runs) != 20 || len(seen) != 20 {
		t.Errorf("%d runs of %d distinct calls, want 20 of 20: %v", len(runs), len(seen), seen)
	}
}

func TestCallReadByADyingWorkerIsNotRunTwice(t *testing.T) {
	log := filepath.Join(t.TempDir(), "runs")
	p := fakePool(t, "die-on-read", supervisor.Config{Workers: 2}, "PYRUN_FAKE_LOG="+log, noExitDelay)
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "once"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != supervisor.StatusCrashed || !strings.Contains(res.Error, "exit status 5") {
		t.Errorf("status %s, error %q; want crashed, exit status 5", res.Status, res.Error)
	}
	if runs := recorded(log); len(runs) != 1 {
		t.Errorf("the call was read %d times, want once: %v", len(runs), runs)
	}
}

func TestStartFailuresBackOffAndRecover(t *testing.T) {
	dir := t.TempDir()
	log, ok := filepath.Join(dir, "starts"), filepath.Join(dir, "ok")
	var logs syncbuf.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &logs})
	p := supervisor.NewPoolWithCommand(fakeCommand("crash-until", "PYRUN_FAKE_LOG="+log, "PYRUN_FAKE_OK="+ok),
		supervisor.Config{Workers: 2}, logger)
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		if t.Failed() {
			t.Logf("pool log:\n%s", logs.String())
		}
	})
	start := time.Now()
	// Back-off doubles from 100ms: the 6th start comes after about
	// 100+200+400+800ms of waiting (two workers start at a time), not in a
	// spin.
	supervisor.WaitUntil(t, func() bool { return len(recorded(log)) >= 6 })
	within(t, "six failed starts", time.Since(start), 900*time.Millisecond, 8*time.Second)
	s := p.Stats()
	if !strings.Contains(s.StartError, "not yet") || s.Ready != 0 {
		t.Errorf("Stats: StartError %q, Ready %d; want the worker's last words and none ready", s.StartError, s.Ready)
	}
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "x"}, nil); !errors.Is(err, supervisor.ErrNoWorkers) {
		t.Errorf("a call while starts fail: %v, want ErrNoWorkers", err)
	}
	if !strings.Contains(logs.String(), "worker failed to start") || !strings.Contains(logs.String(), "retry_in") {
		t.Errorf("the log does not report the failed starts and the back-off")
	}

	if err := os.WriteFile(ok, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 2 })
	if s := p.Stats(); s.StartError != "" {
		t.Errorf("StartError %q after recovery, want none", s.StartError)
	}
	if res, err := p.Run(t.Context(), supervisor.Job{ID: "2", Code: "fine"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Errorf("call after recovery: %v %+v", err, res)
	}
}

func TestWorkerKilledMidCallCostsOnlyThatCall(t *testing.T) {
	p := fakePool(t, "stubborn", supervisor.Config{Workers: 2}, "PYRUN_FAKE_LOG="+filepath.Join(t.TempDir(), "log"))
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 2 })
	ev := newOutputWaiter()
	done := make(chan supervisor.Result, 1)
	go func() {
		res, _ := p.Run(t.Context(), supervisor.Job{ID: "victim", Code: "x"}, ev)
		done <- res
	}()
	ev.wait(t, "started\n")
	victim := busyPID(t, p)
	kill(t, victim)
	res := <-done
	if res.Status != supervisor.StatusCrashed || res.Stdout != "started\n" || !strings.Contains(res.Error, "killed") {
		t.Errorf("status %s stdout %q error %q; want crashed with the output so far", res.Status, res.Stdout, res.Error)
	}
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 2 })
}

func TestWorkerKilledWhileBeingInterrupted(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	p := fakePool(t, "stubborn", supervisor.Config{Workers: 1, InterruptGrace: 20 * time.Second}, "PYRUN_FAKE_LOG="+log)
	done := make(chan supervisor.Result, 1)
	start := time.Now()
	go func() {
		res, _ := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "x", Timeout: 200 * time.Millisecond}, nil)
		done <- res
	}()
	supervisor.WaitUntil(t, func() bool { return len(recorded(log)) > 0 }) // interrupted, and ignoring it
	kill(t, busyPID(t, p))
	res := <-done
	within(t, "the call", time.Since(start), 200*time.Millisecond, 10*time.Second)
	if res.Status != supervisor.StatusTimeout || !strings.Contains(res.Error, "time limit of 200ms") || res.Stdout != "started\n" {
		t.Errorf("status %s stdout %q error %q; want timeout with the output so far", res.Status, res.Stdout, res.Error)
	}
	supervisor.WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
}

func TestMemoryCeilingKillsARunningWorker(t *testing.T) {
	limit := int64(64 << 20)
	mib := supervisor.MemoryCeiling(limit)>>20 + 64
	p := fakePool(t, "balloon", supervisor.Config{Workers: 1, MemoryLimit: limit}, fmt.Sprintf("PYRUN_FAKE_MIB=%d", mib))
	start := time.Now()
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "balloon"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "the call", time.Since(start), 0, 10*time.Second)
	if res.Status != supervisor.StatusMemoryError || res.Stdout != "allocating\n" || !strings.Contains(res.Error, "memory limit") {
		t.Errorf("status %s stdout %q error %q; want memory-error with the output so far", res.Status, res.Stdout, res.Error)
	}
	if res, err := p.Run(t.Context(), supervisor.Job{ID: "2", Code: "small"}, nil); err != nil || res.Status != supervisor.StatusSuccess {
		t.Errorf("call after the kill: %v %+v", err, res)
	}
}

func TestMemoryCeilingKillsAnIdleWorker(t *testing.T) {
	limit := int64(64 << 20)
	mib := supervisor.MemoryCeiling(limit)>>20 + 64
	p := fakePool(t, "balloon", supervisor.Config{Workers: 1, MemoryLimit: limit}, fmt.Sprintf("PYRUN_FAKE_MIB=%d", mib))
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "balloon-later"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	old := res.Worker
	supervisor.WaitUntil(t, func() bool { s := p.Stats(); return restarts(s) == 1 && s.Ready == 1 })
	res, err = p.Run(t.Context(), supervisor.Job{ID: "2", Code: "small"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess || res.Worker == old {
		t.Errorf("call after the kill: %v %+v, want success on a new worker", err, res)
	}
}

// busyPID is the process id of the one worker running a call.
func busyPID(t *testing.T, p *supervisor.Pool) int {
	t.Helper()
	supervisor.WaitUntil(t, func() bool { return len(p.BusyPIDs()) == 1 })
	return p.BusyPIDs()[0]
}

// outputWaiter is an Events that lets a test wait for a call's output.
type outputWaiter struct {
	mu      sync.Mutex
	out     strings.Builder
	chunks  []supervisor.Chunk
	changed chan struct{}
}

func newOutputWaiter() *outputWaiter { return &outputWaiter{changed: make(chan struct{}, 1)} }

func (o *outputWaiter) Output(c supervisor.Chunk) {
	o.mu.Lock()
	o.out.WriteString(c.Text)
	o.chunks = append(o.chunks, c)
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

func (o *outputWaiter) Package(string) {}

func (o *outputWaiter) wait(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		o.mu.Lock()
		got := o.out.String()
		o.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-o.changed:
		case <-timeout:
			t.Fatalf("output %q never came; got %q", want, got)
		}
	}
}

// lines is the output so far as runs of one stream, each run's text joined.
func (o *outputWaiter) lines() []supervisor.Chunk {
	o.mu.Lock()
	defer o.mu.Unlock()
	var runs []supervisor.Chunk
	for _, c := range o.chunks {
		if n := len(runs); n > 0 && runs[n-1].Stream == c.Stream {
			runs[n-1].Text += c.Text
			continue
		}
		runs = append(runs, c)
	}
	return runs
}

func TestCallTimeoutIsCappedByThePool(t *testing.T) {
	p := fakePool(t, "stubborn", supervisor.Config{Workers: 1, Timeout: 300 * time.Millisecond, InterruptGrace: 200 * time.Millisecond},
		"PYRUN_FAKE_LOG="+filepath.Join(t.TempDir(), "log"))
	start := time.Now()
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "x", Timeout: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "a call asking for an hour", time.Since(start), 500*time.Millisecond, 5*time.Second)
	if res.Status != supervisor.StatusTimeout || !strings.Contains(res.Error, "time limit of 300ms") {
		t.Errorf("status %s error %q; want a timeout at the pool's 300ms", res.Status, res.Error)
	}
}

func TestWorkersKilledWhileStartingCostNoCall(t *testing.T) {
	// Killed from outside while starting, again and again: the calls in
	// line wait for a worker that does start; pyrun does not conclude that
	// workers cannot start.
	log := filepath.Join(t.TempDir(), "starts")
	p := fakePool(t, "slow-start", supervisor.Config{Workers: 1}, "PYRUN_FAKE_LOG="+log, noExitDelay)
	done := make(chan error, 1)
	go func() {
		res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "patient"}, nil)
		if err == nil && res.Status != supervisor.StatusSuccess {
			err = fmt.Errorf("status %s: %s", res.Status, res.Error)
		}
		done <- err
	}()
	for i := 1; i <= 3; i++ {
		supervisor.WaitUntil(t, func() bool { return len(recorded(log)) == i })
		var pid int
		fmt.Sscan(recorded(log)[i-1], &pid)
		kill(t, pid)
	}
	if err := <-done; err != nil {
		t.Errorf("the call in line: %v", err)
	}
	if s := p.Stats(); s.StartError != "" {
		t.Errorf("StartError %q; a killed start is not a failed one", s.StartError)
	}
}

func TestIdleWorkerThatSpinsIsReplaced(t *testing.T) {
	p := fakePool(t, "spin", supervisor.Config{Workers: 1})
	res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "spin-after"}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	start := time.Now()
	supervisor.WaitUntil(t, func() bool { s := p.Stats(); return s.Counts.Restarts[supervisor.RestartRecycle] == 1 && s.Ready == 1 })
	within(t, "noticing the spin", time.Since(start), 3*supervisor.HealthInterval, 5*time.Second)
}

func TestBusyWorkerIsNeverKilledForSpinning(t *testing.T) {
	// Calls that keep the CPU busy, one right after the other, so that the
	// worker is often idle when the pool looks, and always busy between.
	p := fakePool(t, "spin", supervisor.Config{Workers: 1})
	for end := time.Now().Add(15 * supervisor.HealthInterval); time.Now().Before(end); {
		res, err := p.Run(t.Context(), supervisor.Job{ID: "1", Code: "spin:150ms"}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess {
			t.Fatalf("%v %+v", err, res)
		}
	}
	if n := restarts(p.Stats()); n != 0 {
		t.Errorf("restarts %v, want none", p.Stats().Counts.Restarts)
	}
}

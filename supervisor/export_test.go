package supervisor

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// NewPoolWithCommand builds a pool whose workers run the command newCmd
// returns, so that tests can supervise misbehaving processes.
func NewPoolWithCommand(newCmd func(Config) (*exec.Cmd, error), cfg Config, log hclog.Logger) *Pool {
	return newPool(Python, func(c Config, _ launch) (*exec.Cmd, error) { return newCmd(c) }, nil, nil, nil, nil, cfg, log)
}

// InterruptSignal is the signal an interrupt sends a worker on this OS.
var InterruptSignal = interruptSignal

// WorkerEnv exposes workerEnv.
var WorkerEnv = workerEnv

// ParseEvent exposes the protocol parser to fuzzing.
func ParseEvent(line []byte) error {
	_, err := parseEvent(line)
	return err
}

// WorkerPIDs lists the process ids of the workers that are idle or running
// a call, so that tests can kill them from outside.
func (p *Pool) WorkerPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, w := range p.idle {
		pids = append(pids, w.cmd.Process.Pid)
	}
	for w := range p.running {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}

// HealthInterval exposes how often the pool checks its workers.
const HealthInterval = healthInterval

// BusyPIDs lists the process ids of the workers running a call.
func (p *Pool) BusyPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for w := range p.running {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}

// ErrGarbage exposes errGarbage, which every protocol error wraps.
var ErrGarbage = errGarbage

// ReadEvents reads events from r with a line bound of max until the first
// error, and returns how many it read and that error.
func ReadEvents(r io.Reader, max int) (int, error) {
	er := newEventReader(r, max)
	for n := 0; ; n++ {
		if _, err := er.next(); err != nil {
			return n, err
		}
	}
}

// ProtocolVersion is the pipe protocol version the supervisor speaks.
const ProtocolVersion = protocolVersion

// denoArgs is denoLaunch's arguments, without what they grant.
func denoArgs(rt *Runtime, e Engine, c Config, l launch) ([]string, error) {
	args, _, err := denoLaunch(rt, e, c, l)
	return args, err
}

// EngineWorkerArgs exposes denoArgs for a plain start of engine e.
func EngineWorkerArgs(rt *Runtime, e Engine, c Config) ([]string, error) {
	return denoArgs(rt, e, c.forEngine(e), launch{})
}

// NewEnginePoolWithCommand is NewPoolWithCommand for a pool of engine e.
func NewEnginePoolWithCommand(e Engine, newCmd func(Config) (*exec.Cmd, error), cfg Config, log hclog.Logger) *Pool {
	return newPool(e, func(c Config, _ launch) (*exec.Cmd, error) { return newCmd(c) }, nil, nil, nil, nil, cfg, log)
}

// FakeEngine is an engine of that name for pools of fake workers, which
// takes part in nothing.
func FakeEngine(name string) Engine { return fakeEngine(name) }

type fakeEngine string

func (e fakeEngine) Name() string                            { return string(e) }
func (fakeEngine) Versions(*Runtime) map[string]string       { return nil }
func (fakeEngine) DefaultMemoryLimit() int64                 { return 256 << 20 }
func (fakeEngine) StartupWork() time.Duration                { return 0 }
func (fakeEngine) Features() Features                        { return Features{} }
func (e fakeEngine) Program() string                         { return string(e) + "/main.ts" }
func (e fakeEngine) Files() []string                         { return []string{e.Program()} }
func (fakeEngine) Permissions(*Runtime) (Permissions, error) { return Permissions{}, nil }

// ProcessCPU is the CPU time process pid has used so far.
func ProcessCPU(t testing.TB, pid int) time.Duration {
	used, _, err := procStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// EngineCPU is the CPU time process pid's V8 threads have used so far
// (engineCPU): what the idle CPU checks take off ProcessCPU.
func EngineCPU(t testing.TB, pid int) time.Duration {
	used, err := engineCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// PID is the dedicated worker's process id.
func (d *Dedicated) PID() int { return d.w.cmd.Process.Pid }

// OpenFirstWall gives the workers of c every Deno permission
// (--allow-all): the first wall opened, so that a test can show what the
// second (the OS sandbox) holds on its own, and what it lets through when
// it is off.
func OpenFirstWall(c Config) Config {
	c.openFirstWall = true
	return c
}

// PrimedMarker is the file that says Deno's cache was filled for workers
// of e from rt.
var PrimedMarker = primedMarker

// CloseAtEnd closes p when the test ends, after its calls, within 30s.
func CloseAtEnd(t testing.TB, p *Pool) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

// WaitUntil polls cond until it holds; the test fails after 10s.
func WaitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SetCheckpointTimeout sets checkpointTimeout for t. Not for parallel tests.
func SetCheckpointTimeout(t testing.TB, d time.Duration) {
	old := checkpointTimeout
	checkpointTimeout = d
	t.Cleanup(func() { checkpointTimeout = old })
}

// WarmingLeft is how many warming calls the worker with process id pid has
// not yet been let run (WarmCalls less the batches sent), or -1 when no
// idle or dedicated worker has that pid.
func (p *Pool) WarmingLeft(pid int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.idle {
		if w.cmd.Process.Pid == pid {
			return w.ready.WarmCalls - w.warmSent
		}
	}
	for w := range p.dedicated {
		if w.cmd.Process.Pid == pid {
			return w.ready.WarmCalls - w.warmSent
		}
	}
	return -1
}

// ParkedPIDs are the process ids of the parked restores (parked.go).
func (p *Pool) ParkedPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, pw := range p.parked {
		pids = append(pids, pw.w.pid())
	}
	return pids
}

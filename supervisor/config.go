package supervisor

import (
	"cmp"
	"fmt"
	"runtime"
	"time"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// Config is the pool's shape and limits. It is copied on use, never written
// back. The zero value of each field means its default.
type Config struct {
	// Workers is the warm pool size. 0: the number of CPUs, at least 2.
	Workers int
	// Timeout is the per-call wall-clock limit and the cap on a call's own
	// timeout. 0: 30s.
	Timeout time.Duration
	// MemoryLimit is the per-worker memory limit in bytes. 0: the
	// engine's DefaultMemoryLimit (Python: 512 MiB).
	MemoryLimit int64
	// MaxOutput caps each output stream and the return value, in bytes. 0: 64 KiB.
	MaxOutput int
	// MaxQueue is how many calls may wait for a worker. 0: 64 per worker.
	MaxQueue int
	// QueueTimeout is the longest a call waits for a worker. 0: 60s.
	QueueTimeout time.Duration
	// ClientMaxWorkers bounds the workers one client owns (Job.Client: a
	// worker that ran a call of a client runs no other client's): a
	// client alone may own Workers of them. 0: half of Workers, rounded
	// up, at least 1 (docs/architecture.md, Workers belong to a client).
	ClientMaxWorkers int
	// ClientWorkerIdle retires a client's worker unused that long. 0: 10m.
	ClientWorkerIdle time.Duration
	// Network is what Python code may reach. "": NetworkPublic.
	Network Network
	// networkless: the engine's code gets no network, whatever Network
	// says (set by forEngine; false: Network holds).
	networkless bool
	// Isolation is how much a call may see of earlier calls. "": IsolationCall.
	Isolation Isolation
	// InterruptGrace is how long an interrupted call has to end before its
	// worker is killed. 0: 500ms.
	InterruptGrace time.Duration
	// StartTimeout bounds a worker's start-up. 0: 60s.
	StartTimeout time.Duration
	// StderrLogPerCall bounds the bytes of worker stderr logged per call
	// (what a worker writes during a call and until its next). 0:
	// DefaultStderrLogPerCall.
	StderrLogPerCall int
	// StderrLogRate bounds the bytes of worker stderr logged a second, for
	// all workers together. 0: DefaultStderrLogRate.
	StderrLogRate int
	// MaxWorkerThreads bounds a worker process's threads (JavaScript
	// Worker threads a call makes through import js); a worker past it is
	// killed and replaced. 0: DefaultMaxWorkerThreads.
	MaxWorkerThreads int
	// IdleCPU is the share of one CPU an idle worker may use over a
	// second; past it (a burner a call left behind) it is killed and
	// replaced. 0: DefaultIdleCPU.
	IdleCPU float64
	// IdleMemorySlack is how much more resident memory than it had fresh a
	// worker may keep after a call; past it, it is replaced. 0: a quarter
	// of MemoryLimit, at least 64 MiB.
	IdleMemorySlack int64

	// Checkpoints makes Python sessions' workers able to take checkpoints
	// (checkpoint.go, docs/sessions.md): they boot with Pyodide's
	// _makeSnapshot, which slows access to JavaScript objects a little.
	Checkpoints bool
	// MaxCheckpoint bounds a checkpoint's raw bytes (memory and files); a
	// larger one is not taken. 0: DefaultMaxCheckpoint.
	MaxCheckpoint int64
	// RestoreSpares are the parked restores kept (parked.go), once a
	// checkpoint was taken or restored: processes started ahead, so that a
	// restore does not wait for a worker's start. 0: DefaultRestoreSpares,
	// negative: none.
	RestoreSpares int

	// Deps are PEP 508 requirements every worker loads before it is
	// ready. nil: none.
	Deps []string
	// PackageIndex is where packages of the Pyodide distribution come
	// from: a URL or a directory holding a pyodide-lock.json and its
	// files. "": the CDN for the runtime's Pyodide version.
	PackageIndex string
	// Wheelhouse is a directory of wheels to install from. "": none.
	Wheelhouse string
	// PyPI is a JSON API like PyPI's, for requirements neither the index
	// nor the wheelhouse meets. "": packages.DefaultPyPI; "none": never.
	PyPI string

	// MaxDisplays and MaxDisplayBytes cap what one call shows (display(),
	// the last expression, figures); more is dropped and counted. 0: 16
	// and 4 MiB.
	MaxDisplays     int
	MaxDisplayBytes int
	// MaxFiles and MaxFileBytes cap the files under /output/ one call
	// returns. 0: 256 and 64 MiB.
	MaxFiles     int
	MaxFileBytes int
	// SpoolDir is where the files a call writes under /output/ wait on
	// disk as they come from the worker, so that pyrun never holds one in
	// memory (OutputFile). "": os.TempDir().
	SpoolDir string
	// Mounts are host folders every worker sees (read-only unless RW).
	// nil: none.
	Mounts []Mount

	// WarmCalls is how many calls of its own a fresh worker runs while it
	// waits for its first call, so that V8 has compiled Pyodide's hot code
	// by then (pyodide-host/warm.ts). 0: DefaultWarmCalls; negative: none.
	// Pool workers of IsolationProcess never warm: each serves one call.
	WarmCalls int

	// OSSandbox is how much of the OS sandbox around each worker process
	// (the second wall, wall.go) pools insist on. "": oswall.ModeAuto.
	OSSandbox oswall.Mode
	// WorkerOpenFiles caps the files a worker process holds open
	// (RLIMIT_NOFILE, behind the OS sandbox). 0: oswall.DefaultOpenFiles.
	WorkerOpenFiles int
	// WorkerFileSize caps, in bytes, the size of a file a worker writes
	// (RLIMIT_FSIZE, behind the OS sandbox; only :rw mounts are writable).
	// 0: oswall.DefaultFileSize.
	WorkerFileSize int64

	// openFirstWall gives workers every Deno permission (--allow-all):
	// only tests set it (export_test.go), to show that the OS sandbox
	// holds with the first wall open. Never set in pyrun.
	openFirstWall bool
}

// Network says what Python code may reach over the network.
type Network string

const (
	NetworkNone     Network = "none"     // nothing
	NetworkPackages Network = "packages" // only the package index hosts
	NetworkPublic   Network = "public"   // the internet, but no loopback, private, link-local or metadata address
	NetworkAll      Network = "all"      // everything Deno can reach
)

// Isolation says what a call may see of the calls before it.
type Isolation string

const (
	// IsolationCall runs calls on reused workers with fresh globals, files and
	// user modules; docs/security.md (Isolation between calls) says what else persists.
	IsolationCall Isolation = "call"
	// IsolationProcess runs every call on a worker that never ran code and
	// discards it afterwards.
	IsolationProcess Isolation = "process"
)

// ParseNetwork checks a --network value.
func ParseNetwork(s string) (Network, error) {
	switch n := Network(s); n {
	case NetworkNone, NetworkPackages, NetworkPublic, NetworkAll:
		return n, nil
	}
	return "", fmt.Errorf("network must be none, packages, public or all, not %q", s)
}

// ParseIsolation checks an --isolation value.
func ParseIsolation(s string) (Isolation, error) {
	switch i := Isolation(s); i {
	case IsolationCall, IsolationProcess:
		return i, nil
	}
	return "", fmt.Errorf("isolation must be call or process, not %q", s)
}

// Defaults of the limits on what a call may leave a worker with.
const (
	// DefaultMaxWorkerThreads: a worker has 10-14 threads of its own (Deno,
	// V8); the rest is for the few Worker threads a call may use.
	DefaultMaxWorkerThreads = 64
	DefaultIdleCPU          = 0.1
	// DefaultWarmCalls: in scripts/bench's firstcalls tier, 200 warming
	// calls before a 3 s pause took a fresh worker's first 20 calls from
	// 2.0-2.2x its settled speed to 1.05-1.3x.
	DefaultWarmCalls = 200
)

// TasksFor is how many tasks (processes and threads) pyrun may need with
// workers workers of at most maxThreads threads each: twice the pool, as a
// retired worker may still be stopping while its replacement starts, with
// two threads of slack each, and 128 for pyrun itself and the process that
// makes a memory snapshot. systemd's TasksMax for the service should be at
// least this (configs/pyrun.service).
func TasksFor(workers, maxThreads int) int {
	return 2*workers*(maxThreads+2) + 128
}

// DefaultClientMaxWorkers is the workers one client may own in a pool of
// workers while other clients have some or wait: half, rounded up, at
// least 1.
func DefaultClientMaxWorkers(workers int) int { return max((workers+1)/2, 1) }

// DefaultClientWorkerIdle is how long a client's worker may go unused
// before it is retired.
const DefaultClientWorkerIdle = 10 * time.Minute

// DefaultWorkers is the pool size when none is configured.
func DefaultWorkers() int { return max(runtime.NumCPU(), 2) }

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	c.Workers = positiveOr(c.Workers, DefaultWorkers())
	c.Timeout = positiveOr(c.Timeout, 30*time.Second)
	c.MemoryLimit = positiveOr(c.MemoryLimit, Python.DefaultMemoryLimit())
	c.MaxOutput = positiveOr(c.MaxOutput, 64<<10)
	c.MaxQueue = positiveOr(c.MaxQueue, 64*c.Workers)
	c.QueueTimeout = positiveOr(c.QueueTimeout, 60*time.Second)
	c.ClientMaxWorkers = min(positiveOr(c.ClientMaxWorkers, DefaultClientMaxWorkers(c.Workers)), c.Workers)
	c.ClientWorkerIdle = positiveOr(c.ClientWorkerIdle, DefaultClientWorkerIdle)
	c.Network = cmp.Or(c.Network, NetworkPublic)
	c.Isolation = cmp.Or(c.Isolation, IsolationCall)
	c.InterruptGrace = positiveOr(c.InterruptGrace, 500*time.Millisecond)
	c.StartTimeout = positiveOr(c.StartTimeout, 60*time.Second)
	c.StderrLogPerCall = positiveOr(c.StderrLogPerCall, DefaultStderrLogPerCall)
	c.StderrLogRate = positiveOr(c.StderrLogRate, DefaultStderrLogRate)
	c.MaxWorkerThreads = positiveOr(c.MaxWorkerThreads, DefaultMaxWorkerThreads)
	c.IdleCPU = positiveOr(c.IdleCPU, DefaultIdleCPU)
	c.IdleMemorySlack = positiveOr(c.IdleMemorySlack, max(c.MemoryLimit/4, 64<<20))
	c.MaxDisplays = positiveOr(c.MaxDisplays, 16)
	c.MaxDisplayBytes = positiveOr(c.MaxDisplayBytes, 4<<20)
	c.MaxFiles = positiveOr(c.MaxFiles, 256)
	c.MaxFileBytes = positiveOr(c.MaxFileBytes, 64<<20)
	c.WarmCalls = cmp.Or(c.WarmCalls, DefaultWarmCalls)
	c.MaxCheckpoint = positiveOr(c.MaxCheckpoint, DefaultMaxCheckpoint)
	c.RestoreSpares = cmp.Or(c.RestoreSpares, DefaultRestoreSpares)
	c.OSSandbox = cmp.Or(c.OSSandbox, oswall.ModeAuto)
	c.WorkerOpenFiles = positiveOr(c.WorkerOpenFiles, oswall.DefaultOpenFiles)
	c.WorkerFileSize = positiveOr(c.WorkerFileSize, oswall.DefaultFileSize)
	return c
}

// positiveOr is v, or def when v is not positive.
func positiveOr[T ~int | ~int64 | ~float64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// forEngine fills zero fields with e's defaults and then the others', and
// drops what e does not take part in: the packages of an engine without
// them are none (one configuration serves every language's pool).
func (c Config) forEngine(e Engine) Config {
	if c.MemoryLimit <= 0 {
		c.MemoryLimit = e.DefaultMemoryLimit()
	}
	f := e.Features()
	if !f.Packages {
		c.Deps, c.PackageIndex, c.Wheelhouse, c.PyPI = nil, "", "", ""
	}
	if !f.Mounts {
		c.Mounts = nil
	}
	c.networkless = !f.Network
	return c.withDefaults()
}

package supervisor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor/oswall"
	"github.com/pyrun/pyrun/supervisor/packages"
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

// denoOverhead is what a worker's Deno needs besides the wasm heap (V8,
// Pyodide's JavaScript, buffers), measured at 40-60 MiB idle.
const denoOverhead = 96 << 20

// heapLimit is the cap on a worker's wasm heap for a memory limit.
func heapLimit(memoryLimit int64) int64 {
	return max(memoryLimit-denoOverhead, 64<<20)
}

// deniedNets are the addresses the public network mode keeps from Python:
// loopback, private, carrier-grade NAT, link-local (cloud metadata lives at
// 169.254.169.254), documentation, benchmarking, multicast and reserved
// ranges, and the IPv6 addresses of cloud metadata services. Deno checks
// names after resolving them, so a public name pointing at 127.0.0.1 is
// refused too, and it reads IPv4-mapped IPv6 addresses as IPv4. Deno 2.9
// accepts no IPv6 ranges here, only single addresses: see publicDenyList.
var deniedNets = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"localhost", "[::1]", "[::]", "[fd00:ec2::254]",
	"metadata.google.internal",
}

// packageHosts are the hosts the packages network mode allows.
var packageHosts = []string{"cdn.jsdelivr.net", "pypi.org", "files.pythonhosted.org"}

// hostConfig is the worker's start-up settings (pyodide-host/protocol.ts).
type hostConfig struct {
	HeapLimit    int64  `json:"heap_limit"`
	MaxLine      int    `json:"max_line"`
	Snapshot     string `json:"snapshot,omitempty"`
	SnapshotSize int64  `json:"snapshot_size,omitempty"`
	MakeSnapshot bool   `json:"make_snapshot,omitempty"`
	// Preload are packages (in the package cache) to load before ready.
	Preload []packages.File `json:"preload,omitempty"`
	// Session makes a worker whose calls share one interpreter state.
	Session bool `json:"session,omitempty"`
	// Mounts are the host folders to mount (--mount).
	Mounts []Mount `json:"mounts,omitempty"`
	// WarmCalls are the warming calls a worker runs while idle before its
	// first call (pyodide-host/warm.ts).
	WarmCalls int `json:"warm_calls,omitempty"`
	// Checkpoints: a session's worker that takes checkpoints; Restore, the
	// checkpoint it starts from (checkpoint.go).
	Checkpoints bool         `json:"checkpoints,omitempty"`
	Restore     *restoreSpec `json:"restore,omitempty"`
	// Park: a parked restore, told its checkpoint later (parked.go).
	Park bool `json:"park,omitempty"`
}

// maxRequestLine bounds a request line to a worker; code and globals are
// limited well below it by the front end.
const maxRequestLine = 64 << 20

// launch says how a Deno process of the runtime starts.
type launch struct {
	// snapshot, when set, is the memory snapshot a worker starts from.
	snapshot *Snapshot
	// makeSnapshot makes a process that writes a memory snapshot to its
	// stdout and exits, instead of a worker. It runs no code of a call.
	makeSnapshot bool
	// preload are the packages a worker loads before it is ready.
	preload []packages.File
	// session makes a Python session's worker (Pool.StartDedicated).
	session bool
	// restore, for a session's worker, is the checkpoint it starts from.
	restore *restoreSpec
	// park, for a session's worker, is the folder of a parked restore's
	// checkpoint, told later (parked.go).
	park string
	// primeCache makes a worker that may write Deno's cache, which takes
	// no call (cacheprime.go).
	primeCache bool
}

// denoArgs is the one place that decides what a worker process of e, or the
// process that makes a snapshot, may do: e's own permissions
// (engine_<name>.go) and those of the features it has. Deno denies
// everything not granted here, and --no-prompt makes a missing permission
// an error instead of a question on a terminal.
func denoArgs(rt *Runtime, e Engine, c Config, l launch) ([]string, error) {
	args, _, err := denoLaunch(rt, e, c, l)
	return args, err
}

// grants are what denoLaunch's flags let a worker's code reach, for the OS
// sandbox to grant the same (wall.go).
type grants struct {
	read, write []string // files and folders named in --allow-read, --allow-write
	network     bool     // some --allow-net
}

// denoLaunch is denoArgs, and what they grant.
func denoLaunch(rt *Runtime, e Engine, c Config, l launch) ([]string, grants, error) {
	args, g, err := denoFlags(rt, e, c, l)
	if err != nil {
		return nil, grants{}, err
	}
	if c.openFirstWall {
		// Tests only (export_test.go): the first wall opened, to prove
		// the second holds on its own. Deno takes --allow-all with no
		// other --allow- flag.
		args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--allow-") })
		args = slices.Insert(args, len(args)-2, "--allow-all")
	}
	return args, g, nil
}

func denoFlags(rt *Runtime, e Engine, c Config, l launch) ([]string, grants, error) {
	fail := func(err error) ([]string, grants, error) { return nil, grants{}, err }
	for _, d := range []string{rt.Dir, rt.PackageDir} {
		if strings.ContainsAny(d, ",") {
			return fail(fmt.Errorf("runtime folder %q contains a comma, which Deno's permission lists cannot hold", d))
		}
	}
	feat := e.Features()
	if l.makeSnapshot && !feat.Snapshots {
		return fail(fmt.Errorf("the %s engine makes no snapshots", e.Name()))
	}
	perm, err := e.Permissions(rt)
	if err != nil {
		return fail(fmt.Errorf("%s engine: %w", e.Name(), err))
	}
	read := slices.Clone(perm.Read)
	if feat.Packages && !l.makeSnapshot && rt.PackageDir != "" {
		// The package cache: only pyrun writes it (packages.Resolver),
		// every file checked against its SHA-256 and read-only.
		read = append(read, rt.PackageDir)
	}
	hc := hostConfig{HeapLimit: heapLimit(c.MemoryLimit), MaxLine: maxRequestLine}
	switch {
	case l.makeSnapshot:
		hc = hostConfig{MakeSnapshot: true, MaxLine: maxRequestLine}
	case l.snapshot != nil && feat.Snapshots:
		// The snapshot the worker starts from: read, never written (see
		// Permissions).
		if strings.ContainsAny(l.snapshot.Path, ",") {
			return fail(fmt.Errorf("snapshot path %q contains a comma, which Deno's permission lists cannot hold", l.snapshot.Path))
		}
		read = append(read, l.snapshot.Path)
		hc.Snapshot, hc.SnapshotSize = l.snapshot.Path, l.snapshot.Size
	}
	var write []string
	if !l.makeSnapshot {
		hc.Session = l.session
		if l.session && feat.Snapshots && (c.Checkpoints || l.restore != nil || l.park != "") {
			hc.Checkpoints = true
			switch {
			case l.restore != nil:
				if strings.ContainsAny(l.restore.Path, ",") {
					return fail(fmt.Errorf("checkpoint path %q contains a comma, which Deno's permission lists cannot hold", l.restore.Path))
				}
				read = append(read, l.restore.Path)
				hc.Restore = l.restore
			case l.park != "":
				// Its own folder, where its checkpoint is put once a session
				// needs it, and nothing else's.
				if strings.ContainsAny(l.park, ",") {
					return fail(fmt.Errorf("checkpoint folder %q contains a comma, which Deno's permission lists cannot hold", l.park))
				}
				read = append(read, l.park)
				hc.Park = true
			}
		}
		if feat.Warming && (c.Isolation != IsolationProcess || l.session) && l.restore == nil && l.park == "" {
			// A pool worker of IsolationProcess serves one call: warming
			// it would only take CPU from the others.
			hc.WarmCalls = max(c.WarmCalls, 0)
		}
		if feat.Packages {
			hc.Preload = l.preload
		}
		if feat.Mounts {
			// Mounts (--mount): read for each host folder, so that the code
			// sees it; write only for those mounted :rw. Nothing else is
			// writable.
			for _, m := range c.Mounts {
				if strings.ContainsAny(m.Host, ",") {
					return fail(fmt.Errorf("mount %q contains a comma, which Deno's permission lists cannot hold", m.Host))
				}
				read = append(read, m.Host)
				if m.RW {
					write = append(write, m.Host)
				}
			}
			hc.Mounts = c.Mounts
		}
	}
	args := []string{
		"run",
		"--no-prompt",
		"--cached-only", // never fetch code: everything is local
		"--no-config",   // ignore any deno.json above the runtime folder
		"--quiet",
		"--allow-read=" + strings.Join(read, ","),
		// Not granted here, so refused unless the engine's own flags
		// (perm.Flags) grant it: write (only :rw mounts, below), env, run,
		// ffi, sys, imports of remote code.
	}
	args = append(args, perm.Flags...)
	if len(write) > 0 {
		// Write: the host folders mounted :rw, and nothing else.
		args = append(args, "--allow-write="+strings.Join(write, ","))
	}
	switch {
	case l.makeSnapshot:
		// The maker needs no network: it loads no packages.
	case !feat.Network:
		// The engine needs none and its code gets none.
	case c.Network == NetworkNone:
	case c.Network == NetworkPackages:
		args = append(args, "--allow-net="+strings.Join(packageHosts, ","))
	case c.Network == NetworkPublic:
		// Everything but deniedNets and the host's own addresses.
		deny, err := publicDenyList()
		if err != nil {
			return fail(err)
		}
		args = append(args, "--allow-net", "--deny-net="+strings.Join(deny, ","))
	case c.Network == NetworkAll:
		args = append(args, "--allow-net")
	default:
		return fail(fmt.Errorf("unknown network mode %q", c.Network))
	}
	hcJSON, err := json.Marshal(hc)
	if err != nil {
		return fail(err)
	}
	g := grants{read: read, write: write, network: slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--allow-net") })}
	return append(args, programPath(rt, e), string(hcJSON)), g, nil
}

// workerEnv is a worker's whole environment: nothing from the host.
func workerEnv(rt *Runtime) []string {
	return []string{
		"DENO_DIR=" + rt.DenoDir,
		"DENO_NO_UPDATE_CHECK=1",
		"DENO_NO_PROMPT=1",
		"NO_COLOR=1",
		// glibc raises its mmap threshold after the first large block is
		// freed (the snapshot's bytes, once restored) and from then on keeps
		// blocks that size in the heap for good. Fixed at its default of
		// 128 KiB, an idle worker holds ~185 MiB instead of ~215 MiB.
		"MALLOC_MMAP_THRESHOLD_=131072",
	}
}

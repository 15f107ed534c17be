package supervisor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// What a worker process may do and starts with: Deno's flags, each
// permission granted from the engine's own and the features it has
// (denoLaunch), the settings the worker reads at start-up (hostConfig) and
// its environment (workerEnv).

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

// grants are what denoLaunch's flags let a worker's code reach, for the OS
// sandbox to grant the same (wall.go).
type grants struct {
	read, write []string // files and folders named in --allow-read, --allow-write
	network     bool     // some --allow-net
}

// denoLaunch is the one place that decides what a worker process of e, or
// the process that makes a snapshot, may do: e's own permissions
// (engine_<name>.go) and those of the features it has. It returns Deno's
// arguments and what they grant. Deno denies everything not granted here,
// and --no-prompt makes a missing permission an error instead of a
// question on a terminal.
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

package supervisor

import (
	"fmt"
	"path/filepath"
	"time"
)

// Engine is one language's worker program: what a Deno process of it runs,
// what it may do, and what of the pool's machinery it takes part in. A Pool
// runs one engine (NewEnginePool); its limits, crash recovery, live output,
// displays, files, sessions and metrics are the same for every engine, as
// the worker protocol is one protocol (docs/protocol.md).
//
// Every engine is a file of its own, engine_<name>.go, that names each
// permission its workers get with its reason; Engines lists them all. A
// language is registered once, in package lang, with its engine.
type Engine interface {
	// Name is the language, as --languages and the ready event's engine
	// field spell it: "python", "r", "javascript".
	Name() string
	// Versions are the versions of what the engine runs, as far as the
	// runtime folder tells them without starting a worker (pyrun version).
	Versions(rt *Runtime) map[string]string
	// DefaultMemoryLimit is the per-worker memory limit (Config.MemoryLimit)
	// when none is configured, in bytes.
	DefaultMemoryLimit() int64
	// StartupWork is how long after ready a worker may keep a CPU busy
	// with the engine's own start-up work before the idle CPU checks judge
	// it; they judge it as soon as it has been seen quiet. 0: none beyond
	// the pool's short warm-up.
	StartupWork() time.Duration
	// Features says which of the pool's optional machinery the engine's
	// workers take part in.
	Features() Features
	// Program is the worker's entry point, relative to Runtime.Dir
	// ("main.ts", "webr/main.ts").
	Program() string
	// Files are the files of what its workers run (Pyodide, webR: their
	// npm package's), relative to Runtime.Dir, that no worker starts
	// without (pyrun warmup looks for them).
	Files() []string
	// Permissions are the Deno permission flags of a worker of rt, besides
	// the ones the pool adds for the features it has (the snapshot it
	// starts from, the package cache, mounts, the network): --allow-read
	// of its program and runtime files, and any flag it needs beyond
	// them. Each with its reason, in the engine's file.
	Permissions(rt *Runtime) (Permissions, error)
}

// Features are the parts of the pool's machinery an engine's workers take
// part in. What an engine does not take part in, the pool never grants nor
// sends it.
type Features struct {
	// Snapshots: workers start from a memory snapshot (snapshot.go) that a
	// maker process writes (HostConfig snapshot, make_snapshot).
	Snapshots bool
	// Packages: workers load packages through the package cache
	// (Config.Deps, need events, HostConfig preload), which they may read.
	Packages bool
	// Network: workers get the network Config.Network allows; false: none.
	Network bool
	// Mounts: workers see Config.Mounts; false: they get no permission on
	// them and are not told of them.
	Mounts bool
	// Globals: calls may bind names (Job.Globals); false: never sent.
	Globals bool
	// Tools: calls may make host tool calls (Job.Catalog, Job.Tools);
	// false: never sent.
	Tools bool
	// Warming: a fresh worker runs Config.WarmCalls calls of its own while
	// it waits for its first (HostConfig warm_calls); false: never told to.
	Warming bool
}

// Permissions are an engine's own Deno flags.
type Permissions struct {
	// Read are the files and folders its workers read: the program and
	// its runtime's files. Absolute paths.
	Read []string
	// Flags are further Deno flags ("--allow-env=...",
	// "--unstable-worker-options"). Never --allow-run, never a broad
	// --allow-env, never --allow-write: those the pool decides (mounts).
	Flags []string
}

// Python is the engine of Python in Pyodide (engine_python.go).
var Python Engine = pythonEngine{}

// engines are all the engines built in, in the order pyrun lists them: a
// new engine is one more engine_<name>.go and one more line here, so that
// every test of what engines may do (engine_test.go, wall_internal_test.go)
// holds it to the rules too. Package lang's languages have these engines,
// no more and no fewer (its tests check).
var engines = []Engine{
	Python,
	R,
	JavaScript,
}

// Engines lists the engines built in.
func Engines() []Engine { return append([]Engine(nil), engines...) }

// programPath is the absolute path of e's entry point in rt.
func programPath(rt *Runtime, e Engine) string {
	return filepath.Join(rt.Dir, filepath.FromSlash(e.Program()))
}

// checkEngine refuses a worker that announced another engine than the one
// it was started as: its program is not the one pyrun meant to run.
func checkEngine(w *worker, e Engine) error {
	if w.ready.Engine != e.Name() {
		w.kill(retirement{RestartProtocol, "it is another engine"})
		return fmt.Errorf("worker says it is engine %q, pyrun started it as %q", w.ready.Engine, e.Name())
	}
	return nil
}

// forEngine drops from job what the pool's engine does not take: globals
// and host tool calls are Python's alone, and no other worker is sent them.
func (p *Pool) forEngine(job Job) Job {
	f := p.engine.Features()
	if !f.Globals {
		job.Globals = nil
	}
	if !f.Tools {
		job.Tools, job.Catalog = nil, nil
	}
	return job
}

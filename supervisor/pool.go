// Package supervisor runs Python calls on a warm pool of Deno worker
// processes, each hosting one Pyodide, and keeps the pool whole: workers that
// time out, crash, break the protocol or grow too big are killed and replaced
// in the background while the others keep serving.
//
//	rt, err := supervisor.Provision(ctx, supervisor.DefaultRuntimeRoot(), os.Stderr, log)
//	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 4}, log)
//	defer pool.Close(ctx)
//	res, err := pool.Run(ctx, supervisor.Job{ID: "1", Code: "print(1)"}, nil)
//
// The package knows processes and limits and nothing of MCP.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// Errors a call can get instead of a Result.
var (
	ErrQueueFull    = errors.New("pyrun is busy: the queue of calls waiting for a worker is full; try again later")
	ErrQueueTimeout = errors.New("pyrun is busy: no worker became free in time; try again later")
	ErrClosed       = errors.New("pyrun is shutting down")
	// ErrNoWorkers wraps the start error while no worker can start.
	ErrNoWorkers = errors.New("no worker could start")
)

// Pool is a warm pool of workers. Its methods are safe for concurrent use.
type Pool struct {
	log    hclog.Logger
	engine Engine                                  // what its workers run
	newCmd func(Config, launch) (*exec.Cmd, error) // builds a worker's command
	snaps  *snapshots                              // nil: workers always start plainly
	primer *cachePrimer                            // nil: nothing fills Deno's cache first
	// newPkgs makes the resolver of a configuration's packages; nil: the
	// pool loads none.
	newPkgs func(Config) (*packages.Resolver, error)

	ctx    context.Context // cancelled by Close: aborts starts and the filler
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler, worker starts and worker stops
	calls  *callLog       // the per-call log line, written after the call
	wake   chan struct{}  // tells the filler to look again
	logs   *stderrBudget  // what of workers' stderr reaches the log

	mu   sync.Mutex
	cfg  Config
	pkgs *packages.Resolver // of cfg; nil: no packages
	gen  int                // bumped when a reconfiguration changes how workers start
	// idle are the workers ready for a call: those owned by a client
	// (worker.owned) and the never-used ones, which putLocked keeps below.
	idle []*worker
	// lines are the calls waiting for a worker, a line per client (Job.Client);
	// order is the clients with calls waiting, the next to get a fresh
	// worker first (poolclients.go); queued counts every line's calls.
	lines    map[string][]*waiter
	order    []string
	queued   int
	running  map[*worker]bool // workers running a call, or cleaning up after one
	busy     int
	starting int
	closed   bool
	drained  chan struct{} // closed when busy reaches 0 after Close
	seq      int
	failures int       // consecutive failed starts
	retryAt  time.Time // no start before this, after failures
	// headStart: until then the first worker runs the pool's first call
	// alone (heldBackLocked); zero once that call ends.
	headStart time.Time
	startErr  error // the last failed start
	counts    Counts

	// dedicated are the Dedicated workers alive: the health check holds
	// them to the memory ceiling of the limit each started with and to the
	// thread limit as it does the pool's own, and to the idle CPU limit
	// between their calls (health.go).
	dedicated map[*worker]dedicatedState
	// dedicatedBusy counts the calls running on dedicated workers.
	dedicatedBusy atomic.Int64

	// Parked restores (parked.go): kept once parking is set, by the first
	// checkpoint taken or restored.
	parked        []*parkedWorker
	parksStarting int
	parking       bool
}

// Counts are cumulative figures since the pool started.
type Counts struct {
	Calls    map[string]int64      // finished calls by status, and "cancelled"
	Restarts map[RestartKind]int64 // workers retired, by kind (RestartCrash, ...)
	Rejected int64                 // calls refused: queue full, queue timeout or closed
	// Starts counts workers that became ready: "snapshot" for those that
	// started from a memory snapshot, "plain" for the others.
	Starts map[string]int64
	// Restores counts sessions' workers restored from checkpoints, by what
	// onto: "parked" (a parked restore, parked.go) or "started" (a worker
	// started for it).
	Restores map[string]int64
}

// Stats is a snapshot of the pool.
type Stats struct {
	Workers  int // the configured pool size
	Ready    int // idle workers waiting for a call, fresh or a client's
	Busy     int // workers running a call or cleaning up after one
	Starting int // workers starting up
	Queued   int // calls waiting for a worker
	// Fresh counts the idle workers that never ran a call (of Ready).
	Fresh int
	// Clients are the workers each client owns (Job.Client), by name;
	// nil when none does.
	Clients map[string]ClientWorkers
	// StartError is the last failed worker start while starts are failing.
	StartError string
	// Parked counts the parked restores waiting (parked.go).
	Parked int
	Counts Counts
}

// NewPool starts a pool of workers from rt. It returns at once; workers
// become ready in the background, and calls queue until one is.
//
// Workers start from a memory snapshot (snapshot.go), which the first start
// checks, or makes when there is none; until then, and when no snapshot can
// be had, they start plainly.
//
// Its workers run Python; NewEnginePool runs another engine.
func NewPool(rt *Runtime, cfg Config, log hclog.Logger) (*Pool, error) {
	return NewEnginePool(rt, Python, cfg, log)
}

// NewEnginePool starts a pool of workers of engine e from rt, as NewPool
// does. Snapshots and packages are only for engines that have them
// (Engine.Features).
func NewEnginePool(rt *Runtime, e Engine, cfg Config, log hclog.Logger) (*Pool, error) {
	newCmd := func(c Config, l launch) (*exec.Cmd, error) {
		cmd := exec.Command(rt.Deno)
		if err := workerCmd(cmd, rt, e, c, l); err != nil {
			return nil, err
		}
		return cmd, nil
	}
	if _, err := newCmd(cfg.forEngine(e), launch{}); err != nil {
		return nil, fmt.Errorf("new %s pool: %w", e.Name(), err)
	}
	var newPkgs func(Config) (*packages.Resolver, error)
	var pkgs *packages.Resolver
	if rt.PackageDir != "" && e.Features().Packages { // a runtime without a package cache loads no packages
		newPkgs = func(c Config) (*packages.Resolver, error) { return NewResolver(rt, c, log.Named("packages")) }
		var err error
		if pkgs, err = newPkgs(cfg); err != nil {
			return nil, fmt.Errorf("new pool: %w", err)
		}
	}
	var snaps *snapshots
	if e.Features().Snapshots {
		snaps = newSnapshots(rt, log.Named("snapshot"))
	}
	return newPool(e, newCmd, snaps, newCachePrimer(rt, e, log.Named("cache")), newPkgs, pkgs, cfg, log), nil
}

// NewResolver is the package resolver of cfg's packages on rt: what
// workers of a pool load, and what `pyrun warmup --deps` caches.
func NewResolver(rt *Runtime, cfg Config, log hclog.Logger) (*packages.Resolver, error) {
	pypi := cfg.PyPI
	switch pypi {
	case "":
		pypi = packages.DefaultPyPI
	case "none":
		pypi = ""
	}
	return packages.New(packages.Options{
		CacheDir:    rt.PackageDir,
		Index:       cfg.PackageIndex,
		BundledLock: filepath.Join(rt.Dir, "node_modules", "pyodide", "pyodide-lock.json"),
		Pyodide:     rt.Pyodide,
		Python:      rt.Python,
		Wheelhouse:  cfg.Wheelhouse,
		PyPI:        pypi,
		Offline:     cfg.Network == NetworkNone,
		Log:         log,
	})
}

// newPool starts a pool whose workers of engine e run newCmd's commands,
// from snaps' snapshots (nil: always plainly), after primer has filled
// Deno's cache (nil: none), loading packages through pkgs, which newPkgs
// makes again for a new configuration (nil: no packages).
func newPool(e Engine, newCmd func(Config, launch) (*exec.Cmd, error), snaps *snapshots, primer *cachePrimer,
	newPkgs func(Config) (*packages.Resolver, error), pkgs *packages.Resolver, cfg Config, log hclog.Logger) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	cfg = cfg.forEngine(e)
	p := &Pool{
		log:     log,
		engine:  e,
		newCmd:  newCmd,
		snaps:   snaps,
		primer:  primer,
		newPkgs: newPkgs,
		pkgs:    pkgs,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		cfg:     cfg,
		logs:    newStderrBudget(cfg),
		calls:   newCallLog(log),
		running: map[*worker]bool{},
		lines:   map[string][]*waiter{},
		counts: Counts{
			Calls: map[string]int64{}, Restarts: map[RestartKind]int64{}, Starts: map[string]int64{},
			Restores: map[string]int64{},
		},
	}
	p.dedicated = map[*worker]dedicatedState{}
	p.wg.Add(1)
	go p.fill()
	p.wg.Add(1)
	go p.watchHealth()
	return p
}

// Engine is the engine the pool's workers run.
func (p *Pool) Engine() Engine { return p.engine }

// Config returns the configuration in force, defaults filled in.
func (p *Pool) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// preloadFiles are the files of the packages a worker of cfg loads before
// it is ready (Config.Deps), fetched into the cache.
func preloadFiles(ctx context.Context, pkgs *packages.Resolver, cfg Config) ([]packages.File, error) {
	if len(cfg.Deps) == 0 {
		return nil, nil
	}
	if pkgs == nil {
		return nil, errors.New("this pool loads no packages, and deps are configured")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	files, err := pkgs.Resolve(ctx, packages.Request{Requires: cfg.Deps, By: "deps"})
	if err != nil {
		return nil, fmt.Errorf("preload packages (deps): %w", err)
	}
	return files, nil
}

// Reconfigure applies a new configuration without disturbing running calls:
// they finish under the settings they started with. A smaller pool retires
// idle workers first; settings that change how workers start (memory
// limit, network) replace workers as they become idle.
func (p *Pool) Reconfigure(cfg Config) error {
	cfg = cfg.forEngine(p.engine)
	if _, err := p.newCmd(cfg, launch{}); err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	old := p.cfg
	if p.newPkgs != nil && (old.PackageIndex != cfg.PackageIndex || old.Wheelhouse != cfg.Wheelhouse ||
		old.PyPI != cfg.PyPI || old.Network != cfg.Network) {
		pkgs, err := p.newPkgs(cfg)
		if err != nil {
			return fmt.Errorf("reconfigure: %w", err)
		}
		p.pkgs = pkgs
	}
	p.cfg = cfg
	p.logs.set(cfg)
	if old.MemoryLimit != cfg.MemoryLimit || old.Network != cfg.Network || old.MaxOutput != cfg.MaxOutput ||
		!slices.Equal(old.Deps, cfg.Deps) || !slices.Equal(old.Mounts, cfg.Mounts) ||
		old.OSSandbox != cfg.OSSandbox || old.WorkerOpenFiles != cfg.WorkerOpenFiles || old.WorkerFileSize != cfg.WorkerFileSize {
		p.gen++
	}
	idle := p.idle
	p.idle = nil
	for _, w := range idle {
		p.putLocked(w)
	}
	p.reparkLocked()
	p.failures, p.retryAt = 0, time.Time{}
	p.kick()
	return nil
}

// Stats describes the pool now.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{
		Workers:  p.cfg.Workers,
		Ready:    len(p.idle),
		Busy:     p.busy,
		Starting: p.starting,
		Queued:   p.queued,
		Fresh:    p.freshIdleLocked(),
		Clients:  p.clientWorkersLocked(),
		Counts: Counts{
			Calls:    maps.Clone(p.counts.Calls),
			Restarts: maps.Clone(p.counts.Restarts),
			Rejected: p.counts.Rejected,
			Starts:   maps.Clone(p.counts.Starts),
			Restores: maps.Clone(p.counts.Restores),
		},
		Parked: len(p.parked),
	}
	if p.startErr != nil {
		s.StartError = p.startErr.Error()
	}
	return s
}

// Close stops taking calls, lets running calls finish until ctx is done,
// then stops every worker. It returns once all of them have exited.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	var drained chan struct{}
	if p.busy > 0 {
		drained = make(chan struct{})
		p.drained = drained
	}
	idle := p.idle
	p.idle = nil
	for _, w := range idle {
		p.retireLocked(w, retireClosing)
	}
	p.reparkLocked()
	p.mu.Unlock()
	p.cancel() // queued calls get ErrClosed; starts abort

	var err error
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			err = fmt.Errorf("close pool: calls still running: %w", ctx.Err())
			p.mu.Lock()
			for w := range p.running {
				w.kill(retirement{restartStopped, "pyrun is shutting down"})
			}
			p.mu.Unlock()
			<-drained // killed calls end at once
		}
	}
	p.wg.Wait()
	p.calls.close()
	return err
}

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
	// newPkgs makes the resolver of a configuration's packages; nil: the
	// pool loads none.
	newPkgs func(Config) (*packages.Resolver, error)

	ctx    context.Context // cancelled by Close: aborts starts and the filler
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler, worker starts and worker stops
	calls  *callLog       // the per-call log line, written after the call
	wake   chan struct{}  // tells the filler to look again
	logs   *stderrBudget  // what of workers' stderr reaches the log

	mu      sync.Mutex
	cfg     Config
	pkgs    *packages.Resolver // of cfg; nil: no packages
	gen     int                // bumped when a reconfiguration changes how workers start
	idle    []*worker
	waiters []*waiter
	running map[*worker]bool // workers running a call, or cleaning up after one
	busy    int
	// settling counts the busy workers whose call has ended but which
	// still clean up after it (settleLater).
	settling int
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

	// dedicated are the Dedicated workers alive, to the memory ceiling of
	// the limit each started with: the health check holds them to it and
	// to the thread limit as it does the pool's own (health.go).
	dedicated map[*worker]int64
	// dedicatedBusy counts the calls running on dedicated workers.
	dedicatedBusy atomic.Int64
}

// Counts are cumulative figures since the pool started.
type Counts struct {
	Calls    map[string]int64 // finished calls by status, and "cancelled"
	Restarts map[string]int64 // workers retired, by kind (RestartCrash, ...)
	Rejected int64            // calls refused: queue full, queue timeout or closed
	// Starts counts workers that became ready: "snapshot" for those that
	// started from a memory snapshot, "plain" for the others.
	Starts map[string]int64
}

// Stats is a snapshot of the pool.
type Stats struct {
	Workers  int // the configured pool size
	Ready    int // idle workers waiting for a call
	Busy     int // workers running a call
	Starting int // workers starting up
	Queued   int // calls waiting for a worker
	// StartError is the last failed worker start while starts are failing.
	StartError string
	Counts     Counts
}

type waiter struct {
	ch     chan *worker  // buffered 1: the worker handed to this call
	broken chan struct{} // closed when no worker can start
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
		args, err := denoArgs(rt, e, c, l)
		if err != nil {
			return nil, err
		}
		return denoCmd(rt, args), nil
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
	return newPool(e, newCmd, snaps, newPkgs, pkgs, cfg, log), nil
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

// denoCmd is a Deno process of rt: an empty environment and a working
// directory of pyrun's own.
func denoCmd(rt *Runtime, args []string) *exec.Cmd {
	cmd := exec.Command(rt.Deno, args...)
	cmd.Env = workerEnv(rt)
	cmd.Dir = rt.WorkDir
	return cmd
}

// newPool starts a pool whose workers of engine e run newCmd's commands,
// from snaps' snapshots (nil: always plainly), loading packages through
// pkgs, which newPkgs makes again for a new configuration (nil: no packages).
func newPool(e Engine, newCmd func(Config, launch) (*exec.Cmd, error), snaps *snapshots,
	newPkgs func(Config) (*packages.Resolver, error), pkgs *packages.Resolver, cfg Config, log hclog.Logger) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	cfg = cfg.forEngine(e)
	p := &Pool{
		log:     log,
		engine:  e,
		newCmd:  newCmd,
		snaps:   snaps,
		newPkgs: newPkgs,
		pkgs:    pkgs,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		cfg:     cfg,
		logs:    newStderrBudget(cfg),
		calls:   newCallLog(log),
		running: map[*worker]bool{},
		counts: Counts{
			Calls: map[string]int64{}, Restarts: map[string]int64{}, Starts: map[string]int64{},
		},
	}
	p.dedicated = map[*worker]int64{}
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

// Run runs job on a free worker, waiting for one if all are busy, and
// returns its result. Output reaches ev (which may be nil) as it is written;
// an ev that is also a Watcher follows the call through the line too.
// A Python error, a timeout or a crash is a Result; an error means the call
// did not run (queue full, queue timeout, pool closed, or ctx done while
// queued: such a call never starts) or was cancelled through ctx while
// running, which stops it as a timeout does.
func (p *Pool) Run(ctx context.Context, job Job, ev Events) (Result, error) {
	queued := time.Now()
	job = p.forEngine(job)
	watch, _ := ev.(Watcher)
	w, res, wait, err := p.runLive(ctx, job, ev, watch)
	if err != nil {
		p.mu.Lock()
		if ctx.Err() != nil {
			p.counts.Calls["cancelled"]++
		} else {
			p.counts.Rejected++
		}
		p.mu.Unlock()
		status := "rejected"
		if ctx.Err() != nil {
			status = "cancelled"
		}
		p.calls.add("id", job.ID, "status", status, "queued", time.Since(queued).Round(time.Microsecond),
			"worker", "", "session", job.Session, "client", job.Client, "error", err.Error())
		return Result{}, err
	}
	res.QueueWait = wait
	if w.retire == "" {
		// Retired now rather than at the health check's next look, which
		// the next call may beat.
		if rss, err := w.residentBytes(); err == nil && w.worseMemory(rss, p.Config()) {
			w.retire = retireMemory
		}
	}
	status := string(res.Status)
	if ctx.Err() != nil {
		status = "cancelled"
	}
	p.settleLater(w, status)
	p.calls.add("id", job.ID, "status", status, "duration", res.Duration.Round(time.Microsecond),
		"queued", wait.Round(time.Microsecond), "worker", w.name, "session", job.Session, "client", job.Client)
	if ctx.Err() != nil {
		return res, fmt.Errorf("call %s: %w", job.ID, ctx.Err())
	}
	return res, nil
}

// acquire takes a free worker, waiting in line when none is. A call whose
// ctx is done gets no worker, even one handed to it as it gave up.
func (p *Pool) acquire(ctx context.Context, watch Watcher) (*worker, Config, error) {
	p.mu.Lock()
	cfg := p.cfg
	if p.closed {
		p.mu.Unlock()
		return nil, cfg, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		p.mu.Unlock()
		return nil, cfg, fmt.Errorf("waiting for a worker: %w", err)
	}
	p.dropDeadIdleLocked()
	// Last in, first out: the most recently used worker has the warmest
	// JIT; fresh workers wait at the bottom (putLocked). A used worker
	// still cleaning up after its call comes back within a fraction of a
	// millisecond: a call waits for it rather than take a fresh one.
	if n := len(p.idle); n > 0 && (p.idle[n-1].calls > 0 || p.settling == 0 || len(p.waiters) >= cfg.MaxQueue) {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy++
		p.running[w] = true
		p.mu.Unlock()
		return w, cfg, nil
	}
	if err := p.brokenLocked(); err != nil {
		p.mu.Unlock()
		return nil, cfg, err
	}
	if len(p.waiters) >= cfg.MaxQueue {
		p.mu.Unlock()
		return nil, cfg, ErrQueueFull
	}
	wt := &waiter{ch: make(chan *worker, 1), broken: make(chan struct{})}
	p.waiters = append(p.waiters, wt)
	p.mu.Unlock()
	if watch != nil {
		watch.Queued(func() int { return p.position(wt) })
	}

	timer := time.NewTimer(cfg.QueueTimeout)
	defer timer.Stop()
	var err error
	select {
	case w := <-wt.ch:
		if ctx.Err() == nil {
			return w, p.Config(), nil
		}
		// Cancelled as the worker arrived: the call must not start.
		err = fmt.Errorf("waiting for a worker: %w", ctx.Err())
		p.mu.Lock()
		p.giveBackLocked(w)
		p.mu.Unlock()
		return nil, cfg, err
	case <-timer.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = fmt.Errorf("waiting for a worker: %w", ctx.Err())
	case <-p.ctx.Done():
		err = ErrClosed
	case <-wt.broken:
		err = p.brokenErr()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.waiters, wt); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		return nil, cfg, err
	}
	// Out of line already: either a worker was handed over as we gave up
	// (pass it on) or the line was dropped because no worker can start.
	select {
	case w := <-wt.ch:
		p.giveBackLocked(w)
	default:
	}
	return nil, cfg, err
}

// position is wt's place in line (1: next), 0 when it is not in line.
func (p *Pool) position(wt *waiter) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Index(p.waiters, wt) + 1
}

// giveBackLocked takes back a worker handed to a call that gave up before
// using it. p.mu is held.
func (p *Pool) giveBackLocked(w *worker) {
	p.busy--
	delete(p.running, w)
	p.putLocked(w)
	p.drainedLocked()
}

// brokenLocked returns ErrNoWorkers when starts keep failing and no worker
// is alive to take calls. p.mu is held.
func (p *Pool) brokenLocked() error {
	if p.failures >= 2 && len(p.idle)+p.busy+p.starting == 0 {
		return fmt.Errorf("%w: %v", ErrNoWorkers, p.startErr)
	}
	return nil
}

func (p *Pool) brokenErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.brokenLocked(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %v", ErrNoWorkers, p.startErr)
}

// settleLater counts the call as ended and takes w back: at once when it
// has nothing to clean up or is to be retired, else once it has cleaned up
// after the call (worker.settle), on a goroutine of the pool's: the
// caller has its result meanwhile.
func (p *Pool) settleLater(w *worker, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endedLocked(status)
	if w.unsettled == "" || w.retire != "" || p.cfg.Isolation == IsolationProcess {
		p.takeBackLocked(w) // a worker to be retired need not clean up
		return
	}
	p.settling++
	limit := p.cfg.Timeout
	// Joins p.wg while w is busy, so before Close, which waits for busy
	// workers first, waits on p.wg.
	p.wg.Go(func() {
		if err := w.settle(limit); err != nil {
			w.log.Warn("worker replaced", "reason", err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.settling--
		p.takeBackLocked(w)
	})
}

// endedLocked counts a call that ended. p.mu is held.
func (p *Pool) endedLocked(status string) {
	p.counts.Calls[status]++
	if !p.headStart.IsZero() {
		p.headStart = time.Time{} // the first call is over: the rest of the pool starts
		p.kick()
	}
}

// takeBackLocked makes a busy worker idle again, or retires it. p.mu is held.
func (p *Pool) takeBackLocked(w *worker) {
	p.busy--
	delete(p.running, w)
	// putLocked first: the worker's retirement joins p.wg before Close,
	// woken by drained, waits on it.
	p.putLocked(w)
	// Calls that waited for a settling worker (acquire) take an idle
	// one if it did not come back.
	for len(p.waiters) > 0 && len(p.idle) > 0 && p.settling == 0 {
		n := len(p.idle)
		next := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.putLocked(next) // to the first waiter
	}
	p.drainedLocked()
}

// drainedLocked tells a waiting Close when the last call has ended. p.mu is held.
func (p *Pool) drainedLocked() {
	if p.closed && p.busy == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

// putLocked makes w available again, or retires it. p.mu is held.
func (p *Pool) putLocked(w *worker) {
	reason := ""
	switch {
	case !w.usable():
		reason = w.retire
		if k := w.killedFor(); k != "" {
			reason = k
		}
		if reason == "" {
			reason = "it exited"
		}
	case p.closed:
		reason = "the pool is closing"
	case w.gen != p.gen:
		reason = "the configuration changed"
	case p.cfg.Isolation == IsolationProcess && w.calls > 0:
		reason = "isolation process: one call per worker"
	case len(p.idle)+p.busy+p.starting >= p.cfg.Workers:
		reason = "the pool shrank"
	}
	if reason != "" {
		p.retireLocked(w, reason)
		return
	}
	if len(p.waiters) > 0 {
		wt := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.busy++
		p.running[w] = true
		wt.ch <- w
		return
	}
	w.idleSince = time.Now()
	if w.calls == 0 {
		// A worker that has run no call yet goes below those that have:
		// its wasm still runs on V8's baseline code, and the optimising
		// compiler works beside it for a second or more of CPU, so its
		// first calls take 2-3x the CPU of a used worker's (scripts/bench
		// -only firstcalls). Among fresh workers the oldest comes first, as
		// more of that compiling is behind it.
		p.idle = slices.Insert(p.idle, 0, w)
		return
	}
	p.idle = append(p.idle, w)
}

// warmBatch is how many warming calls a worker is let run at each of the
// health check's looks (every 200 ms) while the pool is idle: 10-100 ms of
// them, so that a call that comes to another worker shares the CPU with
// warming for no longer than that.
const warmBatch = 20

// warmIdleLocked lets the workers that have had no call, the pool's and the
// dedicated ones, run a batch of their warming calls (PROTOCOL.md, Warming
// calls), while nothing else wants the CPU: the pool whole, no worker
// starting, no call running or waiting. Warming takes about half a core
// and V8's compilers beside it; a start beside it took 25-30% longer
// (scripts/bench -only pool) and a settled worker's calls 1.2x to 1.6x
// (-only reuse). p.mu is held, so no pool call is handed a worker while
// its line is written.
func (p *Pool) warmIdleLocked() {
	if p.closed || p.starting > 0 || p.busy > 0 || len(p.waiters) > 0 ||
		len(p.idle) < p.cfg.Workers || p.dedicatedBusy.Load() > 0 {
		return
	}
	for _, w := range p.idle {
		if w.calls == 0 {
			p.warmLocked(w)
		}
	}
	for w := range p.dedicated {
		if w.started.Load() == 0 {
			p.warmLocked(w)
		}
	}
}

// warmLocked lets w run its next batch of warming calls, if any are left.
func (p *Pool) warmLocked(w *worker) {
	if n := min(warmBatch, w.ready.WarmCalls-w.warmSent); n > 0 {
		w.warmSent += n
		w.warm(n)
	}
}

// dropDeadIdleLocked retires idle workers whose process has ended (killed
// from outside, say), so that no call is handed a dead worker and the
// filler replaces them at once, without waiting for the health check's next
// look. p.mu is held.
func (p *Pool) dropDeadIdleLocked() {
	alive := p.idle[:0]
	for _, w := range p.idle {
		if w.usable() {
			alive = append(alive, w)
			continue
		}
		if w.killedFor() == "" {
			w.log.Warn("idle worker died", "exit", w.exitDescription())
		}
		p.retireLocked(w, retireReason(w))
	}
	clear(p.idle[len(alive):])
	p.idle = alive
}

// retireLocked stops w in the background and has the filler replace it.
func (p *Pool) retireLocked(w *worker, reason string) {
	if !p.closed {
		p.counts.Restarts[restartKind(reason)]++
		p.log.Debug("retiring worker", "worker", w.name, "reason", reason)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		w.close()
	}()
	p.kick()
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its configured size, backing off while starts fail.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var wait time.Duration
		if !p.closed {
			p.dropDeadIdleLocked()
			if d := time.Until(p.retryAt); d > 0 {
				wait = d
			} else {
				for n := len(p.idle) + p.busy + p.starting; n < p.cfg.Workers; n++ {
					if hold, ok := p.heldBackLocked(); ok {
						wait = hold
						break
					}
					p.startLocked()
				}
			}
		}
		p.mu.Unlock()
		var retry <-chan time.Time
		if wait > 0 {
			retry = time.After(wait)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-retry:
		}
	}
}

// firstCallHeadStart is how long the pool's first call may run before the
// rest of the pool starts beside it.
const firstCallHeadStart = 500 * time.Millisecond

// heldBackLocked says whether the filler holds back the start of a worker,
// and for how long at most (0: until a start or a call ends). A pool's first
// worker starts alone and runs the first call alone: starts and calls share
// the CPU, and a fresh server's first call waits for its first worker (on 2
// cores, spawn to first result ~0.65 s this way against ~1.0 s with two
// workers starting together). p.mu is held.
func (p *Pool) heldBackLocked() (time.Duration, bool) {
	if p.starting > 0 && p.counts.Starts["snapshot"]+p.counts.Starts["plain"] == 0 {
		return 0, true
	}
	if d := time.Until(p.headStart); d > 0 && p.busy > 0 {
		return d, true
	}
	return 0, false
}

// startLocked starts one worker in the background. p.mu is held.
func (p *Pool) startLocked() {
	p.seq++
	name := fmt.Sprintf("worker-%d", p.seq)
	cfg, gen, pkgs := p.cfg, p.gen, p.pkgs
	p.starting++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		log := p.log.Named(name)
		began := time.Now()
		var snap *Snapshot
		var verify func() error
		if p.snaps != nil {
			snap, verify = p.snaps.get(p.ctx, cfg)
		}
		var w *worker
		preload, err := preloadFiles(p.ctx, pkgs, cfg)
		var cmd *exec.Cmd
		if err == nil {
			cmd, err = p.newCmd(cfg, launch{snapshot: snap, preload: preload})
		}
		if err == nil {
			w, err = startWorker(p.ctx, name, cmd, cfg, log, p.logs, p.kick, verify)
		}
		if err == nil {
			err = checkEngine(w, p.engine)
		}
		// A start killed from outside says nothing about the snapshot: it
		// must not count towards giving the snapshot up.
		if snap != nil && p.ctx.Err() == nil && !errors.Is(err, errKilledStarting) {
			why := ""
			if w != nil {
				why = w.ready.SnapshotError
			}
			p.snaps.started(snap, err, why)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.starting--
		if err != nil {
			if p.closed {
				return
			}
			if errors.Is(err, errKilledStarting) {
				// Killed from outside: no sign that workers cannot start.
				log.Warn("worker killed while starting; starting another", "error", err)
				p.kick()
				return
			}
			p.failures++
			backoff := min(100*time.Millisecond<<min(p.failures-1, 10), 30*time.Second)
			p.retryAt = time.Now().Add(backoff)
			p.startErr = err
			log.Error("worker failed to start", "error", err, "retry_in", backoff, "failures", p.failures)
			if p.brokenLocked() != nil {
				// Nobody is coming for the calls in line: tell them now
				// rather than at their queue timeout.
				for _, wt := range p.waiters {
					close(wt.broken)
				}
				p.waiters = nil
			}
			p.kick()
			return
		}
		p.failures, p.startErr = 0, nil
		w.gen, w.pkgs = gen, pkgs
		if rss, err := w.residentBytes(); err == nil {
			w.freshRSS.Store(rss) // what a call may not leave it worse than
		}
		w.readyAt = time.Now()
		from := "plain"
		if w.ready.Snapshot {
			from = "snapshot"
		}
		p.counts.Starts[from]++
		log.Debug("worker ready", "startup", time.Since(began).Round(time.Millisecond),
			"in_worker_ms", w.ready.StartupMS, "from", from)
		if p.counts.Starts["snapshot"]+p.counts.Starts["plain"] == 1 {
			p.headStart = time.Now().Add(firstCallHeadStart)
		}
		p.putLocked(w)
		p.kick() // the workers the first one's start held back
	}()
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
		!slices.Equal(old.Deps, cfg.Deps) || !slices.Equal(old.Mounts, cfg.Mounts) {
		p.gen++
	}
	idle := p.idle
	p.idle = nil
	for _, w := range idle {
		p.putLocked(w)
	}
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
		Queued:   len(p.waiters),
		Counts: Counts{
			Calls:    maps.Clone(p.counts.Calls),
			Restarts: maps.Clone(p.counts.Restarts),
			Rejected: p.counts.Rejected,
			Starts:   maps.Clone(p.counts.Starts),
		},
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
		p.retireLocked(w, "the pool is closing")
	}
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
				w.kill("pyrun is shutting down")
			}
			p.mu.Unlock()
			<-drained // killed calls end at once
		}
	}
	p.wg.Wait()
	p.calls.close()
	return err
}

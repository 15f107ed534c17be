package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// ErrWorkerLost is wrapped by the error of a call to a Dedicated worker
// that is gone: killed, crashed, or closed.
var ErrWorkerLost = errors.New("the worker is gone")

// Dedicated is a worker of its own, outside the pool: started on demand
// for one owner (a Python session) that keeps it for many calls, and never
// handed to anyone else. It starts like the pool's workers (from the memory
// snapshot, with the configured packages preloaded) in a mode where calls
// share one interpreter state, and it is never replaced: once its process
// is gone, so is that state, and every later call says so.
//
// Its methods are safe for concurrent use; calls run one at a time, and a
// caller that cares about their order orders them itself.
type Dedicated struct {
	pool *Pool
	w    *worker
	cfg  Config // as it started: MaxOutput bounds its protocol lines

	mu   sync.Mutex // held for a whole call
	lost string     // why it can take no more calls; guarded by mu
	// gone is lost, for TryLost to read while a call holds mu.
	gone atomic.Pointer[string]
	seq  int // checkpoints asked for (checkpoint.go); guarded by mu
}

// StartDedicated starts a dedicated worker under the pool's configuration
// in force. It returns once the worker is ready, or fails. exited, if not
// nil, is called once the process has ended, whenever and however that is:
// its owner learns of a worker killed from outside while it was idle.
func (p *Pool) StartDedicated(ctx context.Context, exited func()) (*Dedicated, error) {
	return p.startDedicated(ctx, exited, nil)
}

// startDedicated is StartDedicated, from the checkpoint restore if given.
func (p *Pool) startDedicated(ctx context.Context, exited func(), restore *restoreSpec) (*Dedicated, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.seq++
	name := fmt.Sprintf("session-worker-%d", p.seq)
	cfg, gen, pkgs := p.cfg, p.gen, p.pkgs
	p.mu.Unlock()
	// The pool's Close aborts a start as it aborts its own.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()

	log := p.log.Named(name)
	began := time.Now()
	var snap *Snapshot
	var verify func() error
	if p.snaps != nil {
		snap, verify = p.snaps.get(ctx, cfg)
	}
	preload, err := preloadFiles(ctx, pkgs, cfg)
	if err != nil {
		return nil, fmt.Errorf("start a dedicated worker: %w", err)
	}
	if p.primer != nil {
		p.primer.ensure(ctx, cfg, snap)
	}
	cmd, err := p.newCmd(cfg, launch{snapshot: snap, preload: preload, session: true, restore: restore})
	if err != nil {
		return nil, fmt.Errorf("start a dedicated worker: %w", err)
	}
	w, err := startWorker(ctx, name, cmd, cfg, log, p.logs, exited, verify)
	if err == nil {
		err = checkEngine(w, p.engine)
	}
	if snap != nil && restore == nil && ctx.Err() == nil && !errors.Is(err, errKilledStarting) {
		why := ""
		if w != nil {
			why = w.ready.SnapshotError
		}
		p.snaps.started(snap, err, why)
	}
	if err != nil {
		if p.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("start a dedicated worker: %w", err)
	}
	d := p.adoptDedicated(w, cfg, gen, pkgs)
	from := "plain"
	if w.ready.Snapshot {
		from = "snapshot"
	}
	w.log.Debug("dedicated worker ready", "startup", time.Since(began).Round(time.Millisecond),
		"in_worker_ms", w.ready.StartupMS, "from", from)
	return d, nil
}

// adoptDedicated makes w, ready and started under cfg of generation gen
// (whose packages are pkgs), a Dedicated worker of the pool's.
func (p *Pool) adoptDedicated(w *worker, cfg Config, gen int, pkgs *packages.Resolver) *Dedicated {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.gen, w.pkgs = gen, pkgs
	// Outside the pool but not outside its limits: a session's code can
	// grow JavaScript memory past the heap cap, or make threads, as a
	// stateless call's can.
	p.dedicated[w] = dedicatedState{ceiling: memoryCeiling(cfg.MemoryLimit), idleSince: time.Now()}
	return &Dedicated{pool: p, w: w, cfg: cfg}
}

// Name is the worker's name in logs.
func (d *Dedicated) Name() string { return d.w.name }

// Current says whether the worker starts as a new one would now: false
// once a reconfiguration has changed how workers start (Pool.Reconfigure),
// as for a pool's own workers. A worker started ahead of its session
// (sessions' spares) serves only while it is current.
func (d *Dedicated) Current() bool {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return d.w.gen == d.pool.gen
}

// Run runs job on the worker, as Pool.Run does on a pool's worker, with
// the time limits of the pool's configuration in force. A call whose
// worker is killed (a time limit past the interrupt, memory, a crash)
// returns its Result, and the worker is lost: see Lost. A call to a lost
// worker returns an error wrapping ErrWorkerLost and does not run.
func (d *Dedicated) Run(ctx context.Context, job Job, ev Events) (Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pool.dedicatedBusy.Add(1) // no warming calls beside it (warmIdleLocked)
	defer d.pool.dedicatedBusy.Add(-1)
	// While the call runs, the CPU is the call's; its idle spell starts
	// again when it ends.
	d.pool.setDedicatedIdle(d.w, time.Time{})
	defer func() { d.pool.setDedicatedIdle(d.w, time.Now()) }()
	if d.lost != "" {
		return Result{}, fmt.Errorf("%w: %s", ErrWorkerLost, d.lost)
	}
	if d.w.unsettled != "" {
		// Its previous call's clean-up may still run (conn.settle).
		if err := d.w.settle(d.pool.Config().Timeout); err != nil {
			d.loseLocked(err.Error())
			return Result{}, fmt.Errorf("%w: %v", ErrWorkerLost, err)
		}
	}
	if why := d.w.stale(); why.given() {
		d.loseLocked(why.why)
		return Result{}, fmt.Errorf("%w: %s", ErrWorkerLost, why.why)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("call %s: %w", job.ID, err)
	}
	job = d.pool.forEngine(job)
	cfg := d.pool.Config()
	// Limits of the call come from the configuration in force; how the
	// worker reads and caps its lines, from the one it started with.
	cfg.MaxOutput, cfg.MemoryLimit = d.cfg.MaxOutput, d.cfg.MemoryLimit
	if watch, ok := ev.(Watcher); ok {
		watch.Started(d.w.name)
	}
	res := d.w.runCall(ctx, job, cfg, newTranscript(cfg.MaxOutput, ev))
	if why := d.lostFor(res); why != "" {
		d.loseLocked(why)
	}
	status := string(res.Status)
	if ctx.Err() != nil {
		status = "cancelled"
	}
	d.pool.mu.Lock()
	d.pool.counts.Calls[status]++
	d.pool.mu.Unlock()
	d.pool.log.Info("call", CallLine{Status: status, Duration: &res.Duration, Worker: d.w.name, SessionID: job.InSession.ID}.Args(job)...)
	if ctx.Err() != nil {
		return res, fmt.Errorf("call %s: %w", job.ID, ctx.Err())
	}
	return res, nil
}

// lostFor says why the worker can take no more calls after res, or "".
// Unlike the pool, which replaces a worker at the first doubt, a dedicated
// worker is kept whenever its state is intact: a write outside the scratch
// folders harms no one else, and a package version conflict only failed
// the call. The caller holds d.mu.
func (d *Dedicated) lostFor(res Result) string {
	w := d.w
	if k := w.killedFor(); k.given() {
		return k.why
	}
	select {
	case <-w.exited:
		return "it exited"
	default:
	}
	switch {
	case res.Status == StatusMemoryError:
		// A MemoryError inside Python may have left any object half made.
		return "it ran out of memory"
	case !w.retire.given() || w.retire == retireVersionConflict:
		w.retire = retirement{}
		return ""
	}
	return w.retire.why
}

// loseLocked marks the worker lost and stops its process in the
// background; Close, which the owner calls, waits for that. The caller
// holds d.mu.
func (d *Dedicated) loseLocked(why string) {
	d.lost = why
	d.gone.Store(&why)
	d.w.log.Debug("dedicated worker lost", "why", why)
	go d.w.close()
}

// Lost says why the worker can take no more calls; "" while it can.
// It waits for a running call.
func (d *Dedicated) Lost() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost == "" {
		if why := d.w.stale(); why.given() {
			d.loseLocked(why.why)
		}
	}
	return d.lost
}

// TryLost is Lost without waiting: "" also while a call runs. A worker
// shared by several sessions (sessions' shared hosts) is asked while
// another session's call may run on it.
func (d *Dedicated) TryLost() string {
	if why := d.gone.Load(); why != nil {
		return *why
	}
	if !d.mu.TryLock() {
		return ""
	}
	defer d.mu.Unlock()
	if d.lost == "" {
		if why := d.w.stale(); why.given() {
			d.loseLocked(why.why)
		}
	}
	return d.lost
}

// Close stops the worker, after the call that is running, if one is. It
// returns once the process has exited.
func (d *Dedicated) Close() {
	d.mu.Lock()
	if d.lost == "" {
		d.lost = "it was closed"
		d.gone.Store(&d.lost)
	}
	d.mu.Unlock()
	d.w.close()
	d.pool.mu.Lock()
	delete(d.pool.dedicated, d.w)
	d.pool.mu.Unlock()
}

// Kill stops the worker at once, a running call with it.
func (d *Dedicated) Kill(why string) { d.w.kill(retirement{restartStopped, why}) }

// dedicatedState is what the health check knows of a Dedicated worker.
type dedicatedState struct {
	ceiling int64 // the memory ceiling of the limit it started with
	// idleSince is when its last call ended (or it became ready); zero
	// while a call runs.
	idleSince time.Time
}

// setDedicatedIdle records when w's idle spell began, or zero while it
// runs a call.
func (p *Pool) setDedicatedIdle(w *worker, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.dedicated[w]; ok {
		st.idleSince = since
		p.dedicated[w] = st
	}
}

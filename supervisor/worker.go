package supervisor

import (
	"context"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// worker is one worker as its pool (or its Dedicated owner) sees it: a
// child process (process), the protocol spoken over it (conn), and what
// the pool keeps of it. The process and the protocol know nothing of
// pools; the rest of this struct is the pool's bookkeeping, guarded by
// the pool's mu unless said otherwise.
type worker struct {
	*process
	*conn

	gen int // the pool configuration generation it was started with
	// pkgs resolves what the worker's calls import; nil: no packages.
	pkgs *packages.Resolver

	idleSince time.Time // when it last became idle
	// owned: a call of client has been handed the worker; from then on it
	// runs the calls of client alone (poolclients.go). false: never used.
	owned  bool
	client string
	// settling: its call has ended and it cleans up after it (settleLater).
	settling bool
	warmSent int // warming calls it was let run
	// freshRSS: resident bytes when it became ready, raised by the health
	// check while it has had no call; 0: unknown.
	freshRSS atomic.Int64
	readyAt  time.Time // when it became ready
	// settled: the health check has seen it idle and quiet once, so its
	// engine's start-up work is over (health.go). Only the health check's
	// goroutine touches it.
	settled bool

	// Owned by the goroutine running a call (the pool hands a worker to one
	// caller at a time).
	calls       int        // calls run
	retire      retirement // given: do not reuse, and why
	undelivered bool       // the last call never reached the worker: it died first
	// elsewhere: the last call's code did not run because it pinned another
	// version of a package this worker had loaded; it goes to a fresh worker.
	elsewhere bool
}

// startWorker starts cmd as a worker and waits until it is ready or fails.
// exited, if not nil, is called once the process has ended, whenever that
// is: the pool replaces an idle worker that something outside killed.
// check, if not nil, runs while the process starts; if it fails, so does
// the start (the pool checks a snapshot's bytes this way).
// logs bounds what of its stderr reaches pyrun's log; nil: a budget of its own.
func startWorker(ctx context.Context, name string, cmd *exec.Cmd, cfg Config, log hclog.Logger, logs *stderrBudget, exited func(), check func() error) (*worker, error) {
	if logs == nil {
		logs = newStderrBudget(cfg.withDefaults())
	}
	c := newConn(cfg)
	p, err := startProcess(name, cmd, log, logs, c.readEvents, exited)
	if err != nil {
		return nil, err
	}
	c.proc = p
	w := &worker{process: p, conn: c}
	if check != nil {
		if err := check(); err != nil {
			p.kill(retirement{restartStopped, "its start was called off"})
			return nil, err
		}
	}
	if err := c.awaitReady(ctx, cfg.StartTimeout); err != nil {
		p.kill(retirement{RestartCrash, "start failed"})
		return nil, err
	}
	// Here, for the pool's workers and the dedicated ones alike: the idle
	// CPU checks leave an engine's start-up work alone for a time after it.
	w.readyAt = time.Now()
	return w, nil
}

// runCall runs job on the worker and keeps what the call tells of it.
func (w *worker) runCall(ctx context.Context, job Job, cfg Config, tr *transcript) Result {
	w.calls++
	res, end := w.run(ctx, job, cfg, w.pkgs, tr)
	res.Error = explainDenied(res.Error, cfg)
	if end.retire.given() {
		w.retire = end.retire
	}
	w.undelivered = end.undelivered
	// A worker that ran calls before this one may have loaded what a
	// fresh worker would not have: the call goes to one. On a fresh
	// worker (preloaded deps) the conflict stands.
	w.elsewhere = end.conflict && w.calls > 1
	return res
}

// usable reports whether the worker may take another call.
func (w *worker) usable() bool {
	return !w.retire.given() && !w.killedFor().given() && !w.gone()
}

//go:build unix

package main

import (
	"context"
	"fmt"
	"time"
)

// benchSpawn times `pyrun stdio` from process start to the first result,
// with the default pool size, and splits each run (spawnParts).
func benchSpawn(ctx context.Context, o *opts) (*series, *spawnParts, error) {
	var ds []time.Duration
	var parts []spawnRun
	for range o.runs {
		p, err := startPyrun(ctx, o, "debug")
		if err != nil {
			return nil, nil, err
		}
		handshake := time.Since(p.started)
		_, err = p.call(ctx, code, nil)
		d := time.Since(p.started)
		run, perr := p.spawnRun(handshake, d)
		p.close()
		if err != nil {
			return nil, nil, err
		}
		if perr != nil {
			return nil, nil, perr
		}
		ds = append(ds, d)
		parts = append(parts, run)
	}
	return newSeries(ds), summarizeSpawn(parts), nil
}

// benchPoolReady times `pyrun stdio --workers n` (and extra flags) from
// process start until n workers are ready, from pyrun's log.
func benchPoolReady(ctx context.Context, o *opts, n int, extra []string) (*series, error) {
	var ds []time.Duration
	for range o.runs {
		p, err := startPyrun(ctx, o, "debug", append([]string{"--workers", fmt.Sprint(n)}, extra...)...)
		if err != nil {
			return nil, err
		}
		err = p.log.waitAlive(ctx, n)
		var d time.Duration
		if err == nil {
			p.log.Locked(func() { d = p.log.ready[n-1].Sub(p.started) })
		}
		p.close()
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return newSeries(ds), nil
}

// benchReplace kills an idle worker of a two-worker pool with SIGKILL and
// times until its replacement is ready, from pyrun's log.
func benchReplace(ctx context.Context, o *opts) (*series, error) {
	p, err := startTwoWorkers(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.close()
	var ds []time.Duration
	for i := range o.runs {
		pids := p.workers()
		if len(pids) == 0 {
			return nil, fmt.Errorf("no worker processes found under pid %d", p.cmd.Process.Pid)
		}
		var before int
		p.log.Locked(func() { before = len(p.log.ready) })
		killed := time.Now()
		if err := kill(pids[i%len(pids)]); err != nil {
			return nil, err
		}
		if err := p.log.waitFor(ctx, "the replacement", func(ready, _ []time.Time) bool { return len(ready) > before }); err != nil {
			return nil, err
		}
		p.log.Locked(func() { ds = append(ds, p.log.ready[before].Sub(killed)) })
		if err := p.log.waitAlive(ctx, 2); err != nil {
			return nil, err
		}
	}
	return newSeries(ds), nil
}

// ---- throughput ---------------------------------------------------------------

//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/supervisor"
)

// sample is one measured series.
type sample struct {
	durations []time.Duration // one per call, in call order
	wall      time.Duration   // the whole series
	// first is the first firstCalls warm-up calls, timed too: on a fresh
	// server, what the first calls cost before the worker settles.
	first []time.Duration
}

// measure calls call warmup times, then n times timing each.
func measure(n, warmup int, call func(i int) error) (sample, error) {
	var first []time.Duration
	for i := range warmup {
		t0 := time.Now()
		if err := call(i); err != nil {
			return sample{}, fmt.Errorf("warm-up call %d: %w", i, err)
		}
		if i < firstCalls {
			first = append(first, time.Since(t0))
		}
	}
	s := sample{durations: make([]time.Duration, n), first: first}
	began := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := call(warmup + i); err != nil {
			return sample{}, fmt.Errorf("call %d: %w", warmup+i, err)
		}
		s.durations[i] = time.Since(t0)
	}
	s.wall = time.Since(began)
	return s, nil
}

// benchSupervisor measures the same call on pyrun's pool directly: the
// worker program and the supervisor, without MCP. It also returns the part
// of each call spent in the worker's Python helper, as the worker measured
// it, and the worker process's CPU time per call in microseconds.
func benchSupervisor(ctx context.Context, rt *supervisor.Runtime, n, warmup int) (sample, sample, float64, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "supervisor", Level: hclog.Warn, Output: os.Stderr})
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, log)
	if err != nil {
		return sample{}, sample{}, 0, err
	}
	defer pool.Close(ctx)
	var inWorker sample
	var before time.Duration
	workerCPU := func() (t time.Duration) {
		for _, pid := range procfs.Children(os.Getpid()) {
			d, _ := cpuTime(pid)
			t += d
		}
		return t
	}
	s, err := measure(n, warmup, func(i int) error {
		if i == warmup {
			before = workerCPU()
		}
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i + 1), Code: code}, nil)
		if err != nil {
			return err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
		}
		if i >= warmup {
			inWorker.durations = append(inWorker.durations, res.InWorker)
		}
		return nil
	})
	inWorker.wall = s.wall
	return s, inWorker, perCallUS(workerCPU()-before, n), err
}

// perCallUS is a CPU time spread over n calls, in microseconds.
func perCallUS(d time.Duration, n int) float64 { return round1(float64(d.Microseconds()) / float64(n)) }

// benchStdio measures tool calls against `pyrun stdio --workers 1` at its
// default log level, as an agent would make them, and the CPU time pyrun
// and its worker spend per call.
func benchStdio(ctx context.Context, o *opts) (sample, sample, cpuReport, error) {
	if o.profileDir != "" {
		path, err := filepath.Abs(filepath.Join(o.profileDir, "pyrun-stdio.pprof"))
		if err != nil {
			return sample{}, sample{}, cpuReport{}, err
		}
		os.Setenv("PYRUN_CPU_PROFILE", path)
		defer os.Unsetenv("PYRUN_CPU_PROFILE")
		defer progress("Go CPU profile of pyrun stdio: go tool pprof -top %s %s", o.bin, path)
	}
	p, err := startPyrun(ctx, o, "info", "--workers", "1")
	if err != nil {
		return sample{}, sample{}, cpuReport{}, err
	}
	defer p.close()
	// CPU time of pyrun and of its worker over the measured calls, and the
	// part of each call in pyrun's pool (the result's duration_ms: from the
	// request written to the worker to its result read), which against the
	// supervisor tier's round trip tells pyrun's pool from its MCP layer.
	var cpu cpuReport
	var before [2]time.Duration
	var inPool sample
	s, err := measure(o.n, o.warmup, func(i int) error {
		if i == o.warmup {
			before = p.cpu()
		}
		res, err := p.call(ctx, code, nil)
		if err == nil && i >= o.warmup {
			if sc, ok := res.StructuredContent.(map[string]any); ok {
				if ms, ok := sc["duration_ms"].(float64); ok {
					inPool.durations = append(inPool.durations, time.Duration(ms*float64(time.Millisecond)))
				}
			}
		}
		return err
	})
	if err == nil {
		after := p.cpu()
		cpu = cpuReport{PyrunUS: perCallUS(after[0]-before[0], o.n), WorkerUS: perCallUS(after[1]-before[1], o.n)}
	}
	inPool.wall = s.wall
	return s, inPool, cpu, err
}

// cpu is the CPU time used so far by pyrun and by its workers.
func (p *pyrunProc) cpu() [2]time.Duration {
	var t [2]time.Duration
	t[0], _ = cpuTime(p.cmd.Process.Pid)
	for _, pid := range p.workers() {
		d, _ := cpuTime(pid)
		t[1] += d
	}
	return t
}

// benchHTTP measures tool calls against `pyrun serve --workers 1` over one
// of its HTTP transports, at its default log level.
func benchHTTP(ctx context.Context, o *opts, transport string) (sample, error) {
	p, stop, err := startServe(ctx, o, transport, "--workers", "1")
	if err != nil {
		return sample{}, err
	}
	defer stop()
	return measure(o.n, o.warmup, func(int) error {
		_, err := p.call(ctx, code, nil)
		return err
	})
}

// ---- starts ------------------------------------------------------------------

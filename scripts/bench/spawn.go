//go:build unix

package main

import (
	"fmt"
	"time"
)

// spawnParts splits spawn to first result (issue 13, item 3), medians over
// the runs. From the benchmark's clock: the MCP handshake done, the first
// worker's ready (pyrun's log), the first result. Of the time to ready,
// the part inside the worker program (worker.ts's start: restoring the
// memory snapshot, connecting pyrun's helper), the rest being pyrun's own
// start, Deno's, and loading the worker program and Pyodide's modules.
// And the CPU time pyrun and its workers had used by the first result
// (schedstat, all threads): on a shared machine the wall times stretch
// with the load, the CPU times much less.
type spawnParts struct {
	HandshakeMS float64 `json:"handshake_ms"`
	ReadyMS     float64 `json:"first_worker_ready_ms"`
	InWorkerMS  float64 `json:"in_worker_ms"`
	BeforeMS    float64 `json:"before_worker_program_ms"`
	FirstCallMS float64 `json:"first_call_ms"`
	PyrunCPUMS  float64 `json:"pyrun_cpu_ms"`
	WorkerCPUMS float64 `json:"workers_cpu_ms"`
}

// spawnRun is one run's parts.
type spawnRun struct {
	handshake, ready, inWorker, result, pyrunCPU, workerCPU time.Duration
}

// spawnRun reads one run's parts, just after its first result.
func (p *pyrunProc) spawnRun(handshake, result time.Duration) (spawnRun, error) {
	r := spawnRun{handshake: handshake, result: result}
	pid := p.cmd.Process.Pid
	cpu, err := processCPU(pid)
	if err != nil {
		return r, fmt.Errorf("pyrun's CPU time: %w", err)
	}
	r.pyrunCPU = cpu
	for _, w := range p.workers() {
		cpu, err := processCPU(w)
		if err != nil {
			continue // a worker that ended meanwhile
		}
		r.workerCPU += cpu
	}
	noReady := false
	p.log.Locked(func() {
		if noReady = len(p.log.ready) == 0; noReady {
			return
		}
		r.ready = p.log.ready[0].Sub(p.started)
		r.inWorker = time.Duration(p.log.inWorker[0] * float64(time.Millisecond))
	})
	if noReady {
		return r, fmt.Errorf("a first result without a worker ready in pyrun's log")
	}
	return r, nil
}

// processCPU is the CPU time all of a process's threads have used.
func processCPU(pid int) (time.Duration, error) {
	st, err := (&threads{pid: pid}).read()
	return st.callRun + st.otherRun, err
}

func summarizeSpawn(runs []spawnRun) *spawnParts {
	pick := func(f func(spawnRun) time.Duration) float64 {
		var xs []time.Duration
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return round1(ms(median(xs)))
	}
	return &spawnParts{
		HandshakeMS: pick(func(r spawnRun) time.Duration { return r.handshake }),
		ReadyMS:     pick(func(r spawnRun) time.Duration { return r.ready }),
		InWorkerMS:  pick(func(r spawnRun) time.Duration { return r.inWorker }),
		BeforeMS:    pick(func(r spawnRun) time.Duration { return r.ready - r.inWorker }),
		FirstCallMS: pick(func(r spawnRun) time.Duration { return r.result - r.ready }),
		PyrunCPUMS:  pick(func(r spawnRun) time.Duration { return r.pyrunCPU }),
		WorkerCPUMS: pick(func(r spawnRun) time.Duration { return r.workerCPU }),
	}
}

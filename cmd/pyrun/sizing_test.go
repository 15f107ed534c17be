package main

import (
	"github.com/pyrun/pyrun/supervisor"
)

// How configs/kubernetes/statefulset.yaml and configs/pyrun.service size
// memory from pyrun's options; their tests compare the files against it.

const mi = int64(1 << 20)

// idleWorker is about what an idle worker of each language holds, rounded
// up (docs/languages.md, "Start-up, speed and memory per language": 205, 566 and
// 111 MB measured).
var idleWorker = map[string]int64{"python": 256 * mi, "r": 640 * mi, "javascript": 128 * mi}

// workerMemory is the most one worker of memory limit limit holds: pyrun
// kills it past supervisor.MemoryCeiling, looking every 200 ms, and 128Mi
// is for what it can grow between two looks.
func workerMemory(limit int64) int64 { return supervisor.MemoryCeiling(limit) + 128*mi }

// memoryFor is the most memory a pyrun with options o holds at once, and
// what it holds idle once a session has started. Per enabled language,
// every worker that can exist at once: the pool's twice (its never-used
// workers and as many owned by clients: docs/architecture.md, Workers
// belong to a client) and one per session
// (spares come out of max-sessions: the sessions package starts one only
// while there is room for another session), each at workerMemory; plus
// 256Mi for pyrun and headroom. Idle: the pool's workers and the spares,
// plus 128Mi.
func memoryFor(o *options) (most, idle int64) {
	most, idle = 256*mi, 128*mi
	for _, l := range o.enabledLanguages() {
		most += int64(2*o.pool(l).workers+o.sessionWorkers()) * workerMemory(int64(o.pool(l).memoryLimit))
		idle += int64(o.pool(l).workers+max(o.sessions.Limits.Spares, 0)) * idleWorker[l.ID]
	}
	return most, idle
}

// workersFor is how many workers a pyrun with options o can have at once.
func workersFor(o *options) int {
	n := 0
	for _, l := range o.enabledLanguages() {
		n += 2*o.pool(l).workers + o.sessionWorkers() // fresh and owned, and session workers
	}
	return n
}

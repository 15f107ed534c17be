package supervisor

// RestartKind is why a worker was retired, as Counts.Restarts counts it and
// metrics label it. The set is small and fixed (RestartKinds) so that it
// can label a metric; what happened in full (a retirement's why) goes to
// the log and, when a call saw it, to the call's error.
type RestartKind string

// The kinds of retirement.
const (
	RestartCrash     RestartKind = "crash"     // the worker process ended on its own
	RestartMemory    RestartKind = "memory"    // it exceeded its memory or thread limit
	RestartInterrupt RestartKind = "interrupt" // a timed-out or cancelled call did not stop
	RestartProtocol  RestartKind = "protocol"  // it broke the pipe protocol or refused a request
	RestartRecycle   RestartKind = "recycle"   // a call left state behind that cannot be cleared
	// RestartPackages: a call pinned another version of a package the
	// worker had loaded; the call went to a fresh worker.
	RestartPackages  RestartKind = "packages"
	RestartConfig    RestartKind = "config"    // a reconfiguration changed how workers start
	RestartShrink    RestartKind = "shrink"    // the pool became smaller
	RestartIsolation RestartKind = "isolation" // isolation process: one call per worker
	// RestartClient: a client's worker unused for Config.ClientWorkerIdle,
	// or retired to make room for another client's first workers.
	RestartClient RestartKind = "client"
)

// restartStopped is the kind of a worker stopped because its pool, or
// the owner of a Dedicated worker, is done with it. It is never counted.
const restartStopped RestartKind = "stopped"

// RestartKinds lists every kind a pool counts, in the order metrics list
// them.
func RestartKinds() []RestartKind {
	return []RestartKind{RestartCrash, RestartMemory, RestartInterrupt, RestartProtocol,
		RestartRecycle, RestartPackages, RestartConfig, RestartShrink, RestartIsolation, RestartClient}
}

// retirement says why a worker is killed or leaves the pool: its kind, for
// the counts, and what happened, for the log. The zero value says nothing:
// the worker is fine.
type retirement struct {
	kind RestartKind
	why  string
}

// given reports whether r says why a worker goes.
func (r retirement) given() bool { return r.kind != "" }

func (r retirement) String() string { return r.why }

// Why workers go. A kill or retirement elsewhere names its own, with its
// kind, where it happens.
var (
	retireExited   = retirement{RestartCrash, "it exited"}
	retireProtocol = retirement{RestartProtocol, "it broke the protocol"}
	// killMemory: its resident memory passed the ceiling (health.go).
	killMemory = retirement{RestartMemory, "it exceeded its memory limit"}
	// killThreads: more threads than Config.MaxWorkerThreads (JavaScript
	// Worker threads made through import js), which could exhaust the
	// service's task limit for every worker. A resource limit, like memory.
	killThreads = retirement{RestartMemory, "it made more threads than its limit"}
	// killSpin, killIdleCPU: code a call left running keeps using CPU
	// while the worker is idle (health.go).
	killSpin    = retirement{RestartRecycle, "it kept a CPU busy while idle"}
	killIdleCPU = retirement{RestartRecycle, "it kept using CPU while idle"}
	// retireMemory (a kill, of an idle worker): resident memory past its
	// size when it was fresh by more than Config.IdleMemorySlack (a big
	// file deleted, a wasm heap that grew and never shrinks), which the
	// next call would not have.
	retireMemory = retirement{RestartRecycle, "a call left it holding more memory than a fresh worker"}
	// retireSettle: its clean-up after a call outlasted a call's time limit.
	retireSettle = retirement{RestartRecycle, "it did not clean up after a call in time"}
	// retireVersionConflict: a call needed another version of a package
	// it has loaded.
	retireVersionConflict = retirement{RestartPackages, "a call needed another version of a package it has loaded"}
	retireClosing         = retirement{restartStopped, "the pool is closing"}
	// retireClientIdle, retireForClient: a client's worker goes
	// (poolclients.go).
	retireClientIdle = retirement{RestartClient, "its client left it unused for --client-worker-idle"}
	retireForClient  = retirement{RestartClient, "another client needed room for a worker of its own"}
)

// recycled is the retirement a worker asked for in its result (the
// protocol's recycle: "the call changed /lib/python3.14/x.py", ...): a
// call left state behind, or ran out of memory, which the worker says in
// the one way every engine spells it.
func recycled(why string) retirement {
	if why == "the call ran out of memory" {
		return retirement{RestartMemory, why}
	}
	return retirement{RestartRecycle, why}
}

package supervisor

import "strings"

// Why a worker was retired, as counted in Counts.Restarts. The set is small
// and fixed so that it can label a metric; the full reason goes to the log.
const (
	RestartCrash     = "crash"     // the worker process ended on its own
	RestartMemory    = "memory"    // it exceeded its memory limit
	RestartInterrupt = "interrupt" // a timed-out or cancelled call did not stop
	RestartProtocol  = "protocol"  // it broke the pipe protocol or refused a call
	RestartRecycle   = "recycle"   // a call left state behind that cannot be cleared
	RestartConfig    = "config"    // a reconfiguration changed how workers start
	RestartShrink    = "shrink"    // the pool became smaller
	RestartIsolation = "isolation" // isolation process: one call per worker
)

// restartKind maps a retirement reason (a worker's kill reason, a worker's
// own recycle request, or the pool's) to its RestartXxx kind.
func restartKind(reason string) string {
	switch reason {
	case killMemory, "the call ran out of memory":
		return RestartMemory
	case "it did not stop after an interrupt", "it could not be interrupted":
		return RestartInterrupt
	case "it broke the protocol", "it did not accept a call", "it failed a call":
		return RestartProtocol
	case killSpin, killIdleCPU, retireMemory, retireSettle:
		return RestartRecycle // a call left code running or memory held behind it
	case killThreads:
		return RestartMemory // a resource limit, like memory
	case "the configuration changed":
		return RestartConfig
	case "the pool shrank":
		return RestartShrink
	case "isolation process: one call per worker":
		return RestartIsolation
	case "it exited", "it did not stop", "start failed":
		return RestartCrash
	}
	if strings.HasPrefix(reason, "the call ") {
		return RestartRecycle // the helper's "the call changed /some/path", ...
	}
	return RestartCrash
}

package main

import (
	"os"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
)

// gcPercent is pyrun's garbage collection target unless GOGC is set. Its
// live heap is a few MiB while a tool call leaves ~170 KiB of garbage
// (mostly the MCP SDK's JSON decoders, each with a fresh 32 KiB buffer), so
// Go's default of 100 collects every few calls: measured on 5000 warm calls,
// 467 collections and 480 us of CPU per call, against 61 collections and
// 365 us at 400, for ~10 MiB more resident memory (scripts/bench/README.md).
// What clients can make pyrun hold is bounded (the request bytes, the
// results waiting, the displays of the calls running), and the Go memory
// limit (goHeapLimit) keeps the heap near that bound: without it, a target
// of 400 let pyrun's heap grow to five times what it held (3 GB under
// large calls sent at once).
const gcPercent = 400

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// goHeapLimit is pyrun's soft limit on its Go heap: --go-memory-limit, or
// what the other limits let clients make it hold, three times over for
// request bytes (a call's arguments are held as the request, decoded, and
// in the call to its worker), and for each worker of the pool and of the
// sessions the displays of the call it runs (twice: the worker's events
// and the result) and its output (a line of up to 16 times max-output and
// its result), above 128 MiB for pyrun itself.
func (o *options) goHeapLimit() int64 {
	if o.goMemoryLimit > 0 {
		return int64(o.goMemoryLimit)
	}
	workers := int64(o.sessionWorkers())
	for _, l := range o.enabledLanguages() {
		workers += int64(o.pool(l).workers)
	}
	return 128<<20 + 3*o.mcp.RequestLimits().MaxBytes + workers*(2*int64(o.supervisor.MaxDisplayBytes)+32*int64(o.supervisor.MaxOutput))
}

// applyMemoryLimit sets the Go memory limit in force, unless GOMEMLIMIT
// set one.
func applyMemoryLimit(o *options, log hclog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	n := o.goHeapLimit()
	if old := debug.SetMemoryLimit(n); old != n {
		log.Info("pyrun's Go memory limit", "go_memory_limit", byteSize(n).String())
	}
}

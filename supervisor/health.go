package supervisor

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// healthInterval is how often the pool looks at its workers from outside:
// their resident memory, whether idle ones are still alive, and whether
// idle ones are burning CPU.
const healthInterval = 200 * time.Millisecond

// memoryCeiling is the resident size past which the supervisor kills a
// worker. Inside, the wasm heap is capped below the memory limit (heapLimit)
// and a worker at that cap measures about the limit itself; the slack above
// it is for what the cap cannot see: V8's own heap and JavaScript buffers a
// call creates through the js module.
func memoryCeiling(limit int64) int64 {
	return limit + max(limit/4, 128<<20)
}

// MemoryCeiling is memoryCeiling, for what sizes the memory of a machine
// or container from the memory limit (configs/kubernetes, configs/pyrun.service).
func MemoryCeiling(limit int64) int64 { return memoryCeiling(limit) }

// Idle spinning: a worker that stayed idle over spinChecks checks in a row
// and used at least spinShare of a CPU in each is running code no call
// asked for (a JavaScript Worker thread or timer a call left behind) and is
// killed. So is one that used more than Config.IdleCPU of a CPU over an
// idleWindow of its idle spell: a burner kept just under spinShare. A
// fresh worker idles at 0% once idleWarmup has passed since it became
// ready (measured: its start-up work ends within a second); windows before
// that are not judged.
const (
	spinShare  = 0.5
	spinChecks = 3
	idleWindow = time.Second
	idleWarmup = 3 * time.Second
	// warmingLimit bounds how long after ready a worker's warming calls
	// (Engine Features.Warming) go unjudged: measured at 1-5 s on two
	// busy cores.
	warmingLimit = 30 * time.Second
	// quietWindows in a row within the idle CPU limit end an engine's
	// start-up work (Engine.StartupWork): one alone may be a compile
	// thread starved of CPU on a loaded machine.
	quietWindows = 3
	// sessionIdleWindow is the window over which a Dedicated worker's (a
	// session's) CPU between calls is held to Config.IdleCPU: longer than
	// idleWindow, and no spin rule, because a session's code may leave
	// work running on purpose (an asyncio task, a timer), and a burst of it
	// is no fault; a task or timer that keeps burning is (measured: one
	// kept 90-96% of a CPU for a session's whole idle time, up to 8 h).
	sessionIdleWindow = 10 * time.Second
)

// LostIdleCPU begins the reason a Dedicated worker is killed for using
// more CPU between its calls than Config.IdleCPU allows (Dedicated.Lost).
const LostIdleCPU = "its code kept using CPU between calls"

// SessionIdleWindow is sessionIdleWindow, for what documents it.
const SessionIdleWindow = sessionIdleWindow

// cpuSample is the CPU time an idle worker had used at a check.
type cpuSample struct {
	used      time.Duration
	at        time.Time
	idleSince time.Time // the idle spell the sample belongs to
	hot       int       // consecutive checks at or above spinShare
	// The start of the current idleWindow of the spell.
	windowUsed time.Duration
	windowAt   time.Time
	slow       bool    // the last window used more than the idle CPU limit
	share      float64 // of a CPU, used over the last window
	quiet      int     // windows in a row that used no more than the idle CPU limit
}

// watchHealth runs until the pool closes. Every healthInterval it kills
// workers whose resident memory is past the ceiling (a call running on one
// ends as memory-error) and idle workers that keep a CPU busy, and retires
// idle workers that died, so that the next call never meets a dead worker
// and the pool refills at once.
func (p *Pool) watchHealth() {
	defer p.wg.Done()
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	cpu := map[*worker]cpuSample{}
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		p.checkHealth(cpu)
		p.mu.Lock()
		if !p.closed {
			p.retireUnusedLocked(time.Now())
		}
		p.warmIdleLocked()
		p.mu.Unlock()
	}
}

// checkHealth is one look at every worker that is idle or running a call.
// cpu holds the samples of idle workers between looks.
func (p *Pool) checkHealth(cpu map[*worker]cpuSample) {
	p.mu.Lock()
	cfg := p.cfg
	ceiling := memoryCeiling(p.cfg.MemoryLimit)
	idle := make(map[*worker]time.Time, len(p.idle))
	workers := make([]*worker, 0, len(p.idle)+len(p.running))
	for _, w := range p.idle {
		idle[w] = w.idleSince
		workers = append(workers, w)
	}
	for w := range p.running {
		workers = append(workers, w)
	}
	// Dedicated workers: memory and threads as the pool's; between calls,
	// CPU over a longer window (sessionIdleWindow).
	own := maps.Clone(p.dedicated)
	for w := range own {
		workers = append(workers, w)
	}
	p.mu.Unlock()

	for w, s := range cpu {
		if t, ok := idle[w]; ok && t.Equal(s.idleSince) {
			continue
		}
		if st, ok := own[w]; ok && !st.idleSince.IsZero() && st.idleSince.Equal(s.idleSince) {
			continue
		}
		delete(cpu, w) // busy, or gone: a call may use all the CPU it likes
	}
	var gone []*worker
	spinning := map[*worker]retirement{} // idle workers to kill, and why
	burning := map[*worker]retirement{}  // idle dedicated workers to kill, and why
	for _, w := range workers {
		select {
		case <-w.exited:
			gone = append(gone, w)
			continue
		default:
		}
		limit := ceiling
		st, isDedicated := own[w]
		if isDedicated {
			limit = st.ceiling
		}
		rss, err := w.residentBytes()
		if err == nil && rss > limit {
			w.log.Warn("killing worker: its memory is past the ceiling", "rss", rss, "ceiling", limit)
			w.kill(killMemory)
			gone = append(gone, w)
			continue
		}
		used, threads, statErr := procStat(w.cmd.Process.Pid)
		if statErr == nil && threads > cfg.MaxWorkerThreads {
			w.log.Warn("killing worker: it made more threads than its limit", "threads", threads, "limit", cfg.MaxWorkerThreads)
			w.kill(killThreads)
			gone = append(gone, w)
			continue
		}
		if isDedicated {
			if statErr == nil && !st.idleSince.IsZero() {
				if share, ok := burnt(w, codeCPU(w, used), st.idleSince, cpu, cfg.IdleCPU, p.startupDone(w)); ok {
					burning[w] = retirement{RestartRecycle, fmt.Sprintf("%s (%.0f%% of a CPU over %s; --idle-cpu allows %.0f%%): a task or timer it left running",
						LostIdleCPU, 100*share, sessionIdleWindow, 100*cfg.IdleCPU)}
				}
			}
			continue
		}
		since, isIdle := idle[w]
		if !isIdle {
			continue
		}
		if err == nil && w.callsBegun.Load() == 0 && rss > w.freshRSS.Load() {
			// No call had begun when rss was read: what it grew by is
			// pyrun's own (warming calls, V8's optimised code), not a call's.
			w.freshRSS.Store(rss)
		}
		if err == nil && w.worseMemory(rss, cfg) {
			w.log.Info("a call left the worker holding more memory than when it was fresh",
				"rss", rss, "fresh", w.freshRSS.Load(), "slack", cfg.IdleMemorySlack)
			spinning[w] = retireMemory
			continue
		}
		if statErr == nil && spun(w, codeCPU(w, used), since, cpu, cfg.IdleCPU, p.startupDone(w)) {
			spinning[w] = killSpin
			if s := cpu[w]; s.hot < spinChecks {
				spinning[w] = killIdleCPU
			}
		}
	}
	if len(gone)+len(spinning)+len(burning) == 0 {
		return
	}
	// Idle workers that died or were killed leave the pool now; a running
	// one is retired by its call, which sees it die. A spinning worker is
	// killed only if it is still idle in the same spell: a call may have
	// taken it since it was sampled.
	p.mu.Lock()
	defer p.mu.Unlock()
	for w, why := range spinning {
		if i := slices.Index(p.idle, w); i >= 0 && w.idleSince.Equal(idle[w]) {
			w.log.Warn("killing idle worker", "reason", why.why)
			w.kill(why)
			gone = append(gone, w)
		}
	}
	// A dedicated worker is killed only if no call has taken it since it
	// was sampled; its owner learns why from the worker (Dedicated.Lost).
	for w, why := range burning {
		if st, ok := p.dedicated[w]; ok && st.idleSince.Equal(own[w].idleSince) {
			w.log.Warn("killing a session's worker", "reason", why.why)
			w.kill(why)
			gone = append(gone, w)
		}
	}
	for _, w := range gone {
		delete(cpu, w)
		delete(p.dedicated, w) // its owner learns through the worker itself
		i := slices.Index(p.idle, w)
		if i < 0 {
			continue
		}
		p.idle = slices.Delete(p.idle, i, i+1)
		if !w.killedFor().given() {
			w.log.Warn("idle worker died", "exit", w.exitDescription())
		}
		p.retireLocked(w, retireReason(w))
	}
}

// codeCPU is the CPU time of w's threads that run code, of used, its
// process's: V8's own threads' (engineCPU) is taken off, so that neither an
// engine's start-up work nor V8 compiling what a call ran is judged as code
// the call left running. Unmeasured, it is all of used. V8's threads are
// read after used was, so they may have gone on a tick past it.
func codeCPU(w *worker, used time.Duration) time.Duration {
	own, err := engineCPU(w.cmd.Process.Pid)
	if err != nil {
		return used
	}
	return max(0, used-own)
}

// spun records the CPU time used by a worker idle since since and reports
// whether it has kept a CPU busy for spinChecks checks of that idle spell,
// or used more than share of a CPU over an idleWindow of it.
func spun(w *worker, used time.Duration, since time.Time, cpu map[*worker]cpuSample, share float64, phase startPhase) bool {
	prev, seen := cpu[w]
	next := nextSample(prev, seen, used, time.Now(), since, share, idleWindow)
	if next.quiet >= quietWindows {
		w.settled = true
	}
	if phase == startingWork {
		next.hot = 0 // the engine's own start-up work may keep a CPU busy
	}
	if phase != settled {
		next.slow = false
		next.windowUsed, next.windowAt = used, next.at // windows start once it has settled
	}
	cpu[w] = next
	return next.hot >= spinChecks || next.slow
}

// burnt records the CPU time used by a Dedicated worker idle since since
// and reports whether it used more than limit of a CPU over a
// sessionIdleWindow of that idle spell, and how much it used. The engine's
// start-up work and warming calls are not judged (phase), as for the pool.
func burnt(w *worker, used time.Duration, since time.Time, cpu map[*worker]cpuSample, limit float64, phase startPhase) (float64, bool) {
	prev, seen := cpu[w]
	next := nextSample(prev, seen, used, time.Now(), since, limit, sessionIdleWindow)
	if phase != settled {
		next.slow = false
		next.windowUsed, next.windowAt = used, next.at
	}
	cpu[w] = next
	return next.share, next.slow
}

// startPhase is where a worker is in settling after its start, for the idle
// CPU checks.
type startPhase int

const (
	// startingWork: within its engine's StartupWork and never yet seen
	// quiet: the engine's own background work (V8 compiling a large wasm
	// module, measured at about 12 s of a CPU for webR) is not judged.
	startingWork startPhase = iota
	// warmingUp: within idleWarmup of ready; spinning is judged, windows
	// against Config.IdleCPU are not.
	warmingUp
	// settled: everything is judged.
	settled
)

// startupDone says which checks apply to w now.
func (p *Pool) startupDone(w *worker) startPhase {
	age := time.Since(w.readyAt)
	switch {
	case !w.settled && age < p.engine.StartupWork():
		return startingWork
	case w.ready.WarmCalls > 0 && w.callsBegun.Load() == 0 && age < warmingLimit:
		// Warming calls before its first (pyodide-host/warm.ts) keep a CPU
		// busy for a second or a few; only pyrun's own code has run in it.
		return startingWork
	case age < idleWarmup:
		return warmingUp
	}
	return settled
}

// nextSample counts a check as hot when the worker used at least spinShare
// of a CPU since the previous check of the same idle spell, and a window
// as slow when it used more than share of a CPU over the window (at least
// window long) that ends at this check. The first sample of a spell starts
// its first window.
func nextSample(prev cpuSample, seen bool, used time.Duration, now, since time.Time, share float64, window time.Duration) cpuSample {
	next := cpuSample{used: used, at: now, idleSince: since, windowUsed: used, windowAt: now}
	if seen && prev.idleSince.Equal(since) {
		if wall := now.Sub(prev.at); wall > 0 && float64(used-prev.used) >= spinShare*float64(wall) {
			next.hot = prev.hot + 1
		}
		next.windowUsed, next.windowAt = prev.windowUsed, prev.windowAt
		if wall := now.Sub(prev.windowAt); wall >= window {
			next.share = float64(used-prev.windowUsed) / float64(wall)
			next.slow = next.share > share
			next.windowUsed, next.windowAt = used, now
			next.quiet = 0
			if !next.slow {
				next.quiet = prev.quiet + 1
			}
		} else {
			next.quiet = prev.quiet
		}
	}
	return next
}

// worseMemory reports whether a worker holds more resident memory, rss,
// than it did fresh by more than the slack.
func (w *worker) worseMemory(rss int64, cfg Config) bool {
	fresh := w.freshRSS.Load()
	return fresh > 0 && rss > fresh+cfg.IdleMemorySlack
}

// retireReason says why a worker that cannot take calls is retired.
func retireReason(w *worker) retirement {
	if k := w.killedFor(); k.given() {
		return k
	}
	if w.retire.given() {
		return w.retire
	}
	return retireExited
}

package supervisor

import (
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

// Idle spinning: a worker that stayed idle over spinChecks checks in a row
// and used at least spinShare of a CPU in each is running code no call
// asked for (a JavaScript Worker thread or timer a call left behind) and is
// killed.
const (
	spinShare  = 0.5
	spinChecks = 3
	killSpin   = "it kept a CPU busy while idle"
)

// cpuSample is the CPU time an idle worker had used at a check.
type cpuSample struct {
	used      time.Duration
	at        time.Time
	idleSince time.Time // the idle spell the sample belongs to
	hot       int       // consecutive checks at or above spinShare
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
	}
}

// checkHealth is one look at every worker that is idle or running a call.
// cpu holds the samples of idle workers between looks.
func (p *Pool) checkHealth(cpu map[*worker]cpuSample) {
	p.mu.Lock()
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
	p.mu.Unlock()

	for w := range cpu {
		if _, ok := idle[w]; !ok {
			delete(cpu, w) // busy, or gone: a call may use all the CPU it likes
		}
	}
	var gone, spinning []*worker
	for _, w := range workers {
		select {
		case <-w.exited:
			gone = append(gone, w)
			continue
		default:
		}
		if rss, err := residentBytes(w.cmd.Process.Pid); err == nil && rss > ceiling {
			w.log.Warn("killing worker: its memory is past the ceiling", "rss", rss, "ceiling", ceiling)
			w.kill(killMemory)
			gone = append(gone, w)
			continue
		}
		if since, ok := idle[w]; ok && spun(w, since, cpu) {
			spinning = append(spinning, w)
		}
	}
	if len(gone)+len(spinning) == 0 {
		return
	}
	// Idle workers that died or were killed leave the pool now; a running
	// one is retired by its call, which sees it die. A spinning worker is
	// killed only if it is still idle in the same spell: a call may have
	// taken it since it was sampled.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range spinning {
		if i := slices.Index(p.idle, w); i >= 0 && w.idleSince.Equal(idle[w]) {
			w.log.Warn("killing worker: it keeps a CPU busy while idle")
			w.kill(killSpin)
			gone = append(gone, w)
		}
	}
	for _, w := range gone {
		delete(cpu, w)
		i := slices.Index(p.idle, w)
		if i < 0 {
			continue
		}
		p.idle = slices.Delete(p.idle, i, i+1)
		if w.killedFor() == "" {
			w.log.Warn("idle worker died", "exit", w.exitDescription())
		}
		p.retireLocked(w, retireReason(w))
	}
}

// spun samples the CPU time of a worker idle since since and reports
// whether it has kept a CPU busy for spinChecks checks of that idle spell.
func spun(w *worker, since time.Time, cpu map[*worker]cpuSample) bool {
	used, err := cpuTime(w.cmd.Process.Pid)
	if err != nil {
		return false
	}
	prev, seen := cpu[w]
	next := nextSample(prev, seen, used, time.Now(), since)
	cpu[w] = next
	return next.hot >= spinChecks
}

// nextSample counts a check as hot when the worker used at least spinShare
// of a CPU since the previous check of the same idle spell.
func nextSample(prev cpuSample, seen bool, used time.Duration, now, since time.Time) cpuSample {
	next := cpuSample{used: used, at: now, idleSince: since}
	if seen && prev.idleSince.Equal(since) {
		if wall := now.Sub(prev.at); wall > 0 && float64(used-prev.used) >= spinShare*float64(wall) {
			next.hot = prev.hot + 1
		}
	}
	return next
}

// retireReason says why a worker that cannot take calls is retired.
func retireReason(w *worker) string {
	if k := w.killedFor(); k != "" {
		return k
	}
	if w.retire != "" {
		return w.retire
	}
	return "it exited"
}

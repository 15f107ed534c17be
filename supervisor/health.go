package supervisor

import (
	"time"
)

// healthInterval is how often the pool looks at its workers from outside:
// their resident memory, and whether idle ones are still alive.
const healthInterval = 200 * time.Millisecond

// memoryCeiling is the resident size past which the supervisor kills a
// worker. Inside, the wasm heap is capped below the memory limit (heapLimit)
// and a worker at that cap measures about the limit itself; the slack above
// it is for what the cap cannot see: V8's own heap and JavaScript buffers a
// call creates through the js module.
func memoryCeiling(limit int64) int64 {
	return limit + max(limit/4, 128<<20)
}

// watchHealth runs until the pool closes. Every healthInterval it kills
// workers whose resident memory is past the ceiling (a call running on one
// ends as memory-error) and retires idle workers that died, so that the
// next call never meets a dead worker and the pool refills at once.
func (p *Pool) watchHealth() {
	defer p.wg.Done()
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		p.checkHealth()
	}
}

// checkHealth is one look at every worker that is idle or running a call.
func (p *Pool) checkHealth() {
	p.mu.Lock()
	ceiling := memoryCeiling(p.cfg.MemoryLimit)
	workers := make([]*worker, 0, len(p.idle)+len(p.running))
	workers = append(workers, p.idle...)
	for w := range p.running {
		workers = append(workers, w)
	}
	p.mu.Unlock()

	var gone []*worker
	for _, w := range workers {
		select {
		case <-w.exited:
			gone = append(gone, w)
			continue
		default:
		}
		rss, err := residentBytes(w.cmd.Process.Pid)
		if err != nil || rss <= ceiling {
			continue // no /proc here, or the process just ended: the next look sees it
		}
		w.log.Warn("killing worker: its memory is past the ceiling", "rss", rss, "ceiling", ceiling)
		w.kill(killMemory)
		gone = append(gone, w)
	}
	if len(gone) == 0 {
		return
	}
	// Idle workers that died or were killed leave the pool now; a running
	// one is retired by its call, which sees it die.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range gone {
		for i, x := range p.idle {
			if x == w {
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				if w.killedFor() == "" {
					w.log.Warn("idle worker died", "exit", w.exitDescription())
				}
				p.retireLocked(w, retireReason(w))
				break
			}
		}
	}
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

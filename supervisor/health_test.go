package supervisor

import (
	"testing"
	"time"
)

func TestNextSampleCountsOnlyOneIdleSpell(t *testing.T) {
	t0 := time.Now()
	spell, other := t0.Add(-time.Second), t0.Add(-time.Millisecond)
	tick := healthInterval
	s := nextSample(cpuSample{}, false, 0, t0, spell, 0.1, idleWindow)
	for i := 1; i <= spinChecks; i++ {
		// A whole CPU over each interval, idle all along.
		s = nextSample(s, true, time.Duration(i)*tick, t0.Add(time.Duration(i)*tick), spell, 0.1, idleWindow)
		if s.hot != i {
			t.Fatalf("check %d: hot %d, want %d", i, s.hot, i)
		}
	}
	// A call took the worker in between: the CPU was the call's.
	s = nextSample(s, true, 10*tick, t0.Add(10*tick), other, 0.1, idleWindow)
	if s.hot != 0 {
		t.Errorf("hot %d after a new idle spell, want 0", s.hot)
	}
	// Idle and quiet.
	s = nextSample(s, true, 10*tick+time.Millisecond, t0.Add(11*tick), other, 0.1, idleWindow)
	if s.hot != 0 {
		t.Errorf("hot %d for a quiet worker, want 0", s.hot)
	}
}

// Windows that used no more than the idle share of a CPU, quietWindows of
// them in a row, end an engine's start-up work (startupDone); a busy one
// starts the count again.
func TestNextSampleCountsQuietWindows(t *testing.T) {
	t0 := time.Now()
	spell := t0
	s := nextSample(cpuSample{}, false, 0, t0, spell, 0.1, idleWindow)
	used := time.Duration(0)
	step := func(i int, cpu time.Duration) {
		used += cpu
		s = nextSample(s, true, used, t0.Add(time.Duration(i)*time.Second), spell, 0.1, idleWindow)
	}
	step(1, 800*time.Millisecond)
	if s.quiet != 0 {
		t.Fatalf("a busy window counts as quiet: %d", s.quiet)
	}
	step(2, time.Millisecond)
	step(3, time.Millisecond)
	if s.quiet != 2 {
		t.Fatalf("two quiet windows counted %d", s.quiet)
	}
	step(4, 500*time.Millisecond)
	if s.quiet != 0 {
		t.Fatalf("a busy window did not restart the count: %d", s.quiet)
	}
}

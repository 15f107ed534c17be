package supervisor

import (
	"slices"
	"testing"
)

// Every kind a pool counts is listed once, for metrics, and the kind of a
// worker stopped on purpose is not among them.
func TestRestartKindsAreListedOnce(t *testing.T) {
	kinds := RestartKinds()
	for i, k := range kinds {
		if k == "" || slices.Contains(kinds[i+1:], k) {
			t.Errorf("kind %q is empty or listed twice in %v", k, kinds)
		}
	}
	if slices.Contains(kinds, restartStopped) {
		t.Errorf("%q is counted", restartStopped)
	}
	for _, r := range []retirement{retireExited, retireProtocol, killMemory, killThreads, killSpin, killIdleCPU,
		retireMemory, retireSettle, retireVersionConflict, retireToolAnswer} {
		if !slices.Contains(kinds, r.kind) || r.why == "" {
			t.Errorf("retirement %+v: its kind is not counted, or it says nothing", r)
		}
	}
}

// A worker's own recycle request is memory when the call ran out of it,
// and recycle otherwise, whatever the engine's wording of the rest.
func TestRecycledKinds(t *testing.T) {
	for why, want := range map[string]RestartKind{
		"the call ran out of memory":                                 RestartMemory,
		"the call changed /lib/python3.14/x.py":                      RestartRecycle,
		"the call could not be stopped inside its JavaScript worker": RestartRecycle,
	} {
		if got := recycled(why); got.kind != want || got.why != why {
			t.Errorf("recycled(%q) = %+v, want kind %q", why, got, want)
		}
	}
}

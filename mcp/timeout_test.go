package mcp

import (
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// A timeout_seconds too small for the worker to even read the call is
// rounded up to the documented minimum: 1e-10 used to become 0 (the full
// server limit) and 1e-7 a limit that passed before the worker read the call.
func TestTinyTimeoutIsRoundedUp(t *testing.T) {
	for _, tc := range []struct {
		seconds float64
		want    time.Duration
	}{
		{1e-10, supervisor.MinCallTimeout},
		{1e-7, supervisor.MinCallTimeout},
		{0.05, supervisor.MinCallTimeout},
		{0.1, 100 * time.Millisecond},
		{2.5, 2500 * time.Millisecond},
		{1e300, 1e6 * time.Second},
	} {
		if got := jobTimeout(tc.seconds); got != tc.want {
			t.Errorf("timeout_seconds %g: limit %s, want %s", tc.seconds, got, tc.want)
		}
	}
}

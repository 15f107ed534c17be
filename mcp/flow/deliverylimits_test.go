package flow_test

import (
	"strings"
	"testing"

	"github.com/pyrun/pyrun/mcp/flow"
)

// The delivery limits check themselves: the defaults pass, and a value a
// user set out of range is refused with the setting's name.
func TestDeliveryLimitsValidate(t *testing.T) {
	if err := flow.DefaultDeliveryLimits().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*flow.DeliveryLimits)
		want string
	}{
		{func(l *flow.DeliveryLimits) { l.WriteTimeout = 0 }, "write-timeout must be at least 1s, not 0s"},
		{func(l *flow.DeliveryLimits) { l.SessionResults = 5000 }, "session-pending-results must be between 1 and 4096, not 5000"},
		{func(l *flow.DeliveryLimits) { l.SessionBytes = 1 << 10 }, "session-pending-bytes must be at least 64KiB, not 1KiB"},
		{func(l *flow.DeliveryLimits) { l.ClientBytes = 1 << 20 }, "client-pending-bytes (1MiB) must be at least session-pending-bytes (8MiB)"},
	} {
		l := flow.DefaultDeliveryLimits()
		c.set(&l)
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", l, err, c.want)
		}
	}
}

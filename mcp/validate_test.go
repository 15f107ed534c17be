package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/outputs"
)

// The front end's options check what a user set, naming each setting as
// the flag is called; a zero request limit is worked out from max-code.
func TestOptionsValidate(t *testing.T) {
	good := func() mcp.Options {
		return mcp.Options{MaxCode: 1 << 20, MaxInputFiles: mcp.DefaultMaxInputFiles,
			Live:     mcp.LiveOptions{Buffer: 256 << 10, ProgressInterval: time.Second},
			Outputs:  outputs.Config{TTL: 15 * time.Minute, MaxBytes: 64 << 20, MaxFiles: 256},
			Delivery: flow.DefaultDeliveryLimits(), Tasks: mcp.DefaultTaskOptions(), AppCellBytes: -1}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*mcp.Options)
		want string
	}{
		{func(o *mcp.Options) { o.MaxCode = 100 }, "max-code must be between 1KiB and 32MiB, not 100"},
		{func(o *mcp.Options) { o.MaxInputFiles = 0 }, "max-input-files must be between 1 and 100000, not 0"},
		{func(o *mcp.Options) { o.Live.ProgressInterval = time.Millisecond }, "progress-interval must be at least 100ms, not 1ms"},
		{func(o *mcp.Options) { o.Outputs.TTL = 0 }, "output-ttl must be at least 1s, not 0s"},
		{func(o *mcp.Options) { o.Outputs.MaxFiles = 0 }, "output-store-files must be between 1 and 65536, not 0"},
		{func(o *mcp.Options) { o.AppCellBytes = 2 << 30 }, "app-cell-bytes must be between 0 and 1GiB, not 2GiB"},
		{func(o *mcp.Options) { o.Requests.ClientMaxBytes = 1 << 20 }, "client-max-request-bytes (1MiB) must be at least the largest request body (4MiB"},
		{func(o *mcp.Options) { o.Requests.MaxBytes = 8 << 20 }, "max-request-bytes (8MiB) must be at least client-max-request-bytes (16MiB)"},
		{func(o *mcp.Options) { o.Tasks.ClientMax = -1 }, "client-max-tasks"},
	} {
		o := good()
		c.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
	o := good()
	o.MaxCode = 8 << 20
	if l := o.RequestLimits(); l.ClientMaxBytes != 34<<20 || l.MaxBytes != 136<<20 {
		t.Errorf("request limits for max-code 8MiB: %+v, want 34MiB and 136MiB", l)
	}
}

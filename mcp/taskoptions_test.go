package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp"
)

// The tasks' configuration checks itself: its defaults pass, and a value
// out of range is refused with the setting's name, as the flag is called.
func TestTaskOptionsValidate(t *testing.T) {
	if err := mcp.DefaultTaskOptions().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*mcp.TaskOptions)
		want string
	}{
		{func(o *mcp.TaskOptions) { o.TTL = 500 * time.Millisecond }, "task-ttl must be between 1s and 24h, not 500ms"},
		{func(o *mcp.TaskOptions) { o.TTL = 25 * time.Hour }, "task-ttl"},
		{func(o *mcp.TaskOptions) { o.ClientMax = 0 }, "client-max-tasks must be between 1 and 4096, not 0"},
		{func(o *mcp.TaskOptions) { o.ClientBytes = 1 << 10 }, "client-task-bytes must be at least 64KiB, not 1KiB"},
		{func(o *mcp.TaskOptions) { o.After = -time.Second }, "task-after"},
	} {
		o := mcp.DefaultTaskOptions()
		c.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", o, err, c.want)
		}
	}
}

package codemode_test

import (
	"strings"
	"testing"

	"github.com/pyrun/pyrun/mcp/codemode"
)

// Code mode's limits check themselves: the defaults pass, and a value a
// user set out of range, zero included, is refused with the setting's name.
func TestOptionsValidate(t *testing.T) {
	if err := codemode.DefaultOptions().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*codemode.Options)
		want string
	}{
		{func(o *codemode.Options) { o.MaxCalls = 0 }, "max-tool-calls must be between 1 and 10000, not 0"},
		{func(o *codemode.Options) { o.Concurrency = 100 }, "tool-concurrency must be between 1 and 64, not 100"},
		{func(o *codemode.Options) { o.MaxListing = 2 << 20 }, "max-tool-listing must be between 1KiB and 1MiB, not 2MiB"},
		{func(o *codemode.Options) { o.MaxMessage = 1 << 10 }, "max-tool-message must be between 64KiB and 256MiB, not 1KiB"},
	} {
		o := codemode.DefaultOptions()
		c.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", o, err, c.want)
		}
	}
}

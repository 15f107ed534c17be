package codemode

import (
	"errors"
	"strings"
	"testing"
)

// A server retrying after a failure is not available to the code, as a
// server that is down: only a first attempt is "connecting".
func TestStatusOfARetryIsNotAvailable(t *testing.T) {
	for _, c := range []struct {
		state state
		err   error
		want  string
	}{
		{connecting, nil, "connecting"},
		{connected, nil, ""},
		{down, errors.New("no such file"), "not available (no such file)"},
		{connecting, errors.New("no such file"), "not available (no such file); trying again"},
	} {
		u := &upstream{state: c.state, lastErr: c.err}
		if got := u.status(); got != c.want {
			t.Errorf("state %v, last error %v: status %q, want %q", c.state, c.err, got, c.want)
		}
		if c.err != nil && !strings.HasPrefix(u.status(), "not available") {
			t.Errorf("state %v after a failure: %q does not say not available", c.state, u.status())
		}
	}
}

package httpfront_test

import (
	"strings"
	"testing"

	"github.com/pyrun/pyrun/mcp/httpfront"
)

// The MCP sessions' limits check themselves, naming the settings.
func TestSessionLimitsValidate(t *testing.T) {
	ok := httpfront.SessionLimits{Max: httpfront.DefaultMaxSessions, ClientMax: httpfront.DefaultClientMaxSessions}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for l, want := range map[httpfront.SessionLimits]string{
		{Max: 0, ClientMax: 1}:   "max-mcp-sessions must be at least 1, not 0",
		{Max: 10, ClientMax: 0}:  "client-max-mcp-sessions must be between 1 and max-mcp-sessions (10), not 0",
		{Max: 10, ClientMax: 11}: "client-max-mcp-sessions must be between 1 and max-mcp-sessions (10), not 11",
	} {
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", l, err, want)
		}
	}
}

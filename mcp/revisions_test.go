package mcp

import (
	"net/http/httptest"
	"slices"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every revision pyrun claims is one the SDK serves, 2026-07-28 first.
func TestProtocolVersions(t *testing.T) {
	for _, v := range ProtocolVersions {
		if !slices.Contains(sdk.SupportedProtocolVersions(), v) {
			t.Errorf("pyrun claims %s, which go-sdk does not serve", v)
		}
	}
	if ProtocolVersions[0] != "2026-07-28" {
		t.Errorf("newest revision %s, want 2026-07-28", ProtocolVersions[0])
	}
}

// /mcp sends a request to the stateless handler exactly when its
// MCP-Protocol-Version is 2026-07-28 or a later one.
func TestIsStatelessRevision(t *testing.T) {
	for v, want := range map[string]bool{
		"":           false, // initialize, and clients before 2025-06-18
		"2024-11-05": false,
		"2025-03-26": false,
		"2025-06-18": false,
		"2025-11-25": false,
		"2026-07-28": true,
		"2027-01-01": true, // the stateless handler answers with the revisions it has
		"garbage":    true, // likewise: it is no session revision
		"2025-12-31": false,
	} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		if v != "" {
			r.Header.Set("MCP-Protocol-Version", v)
		}
		if got := isStatelessRevision(r); got != want {
			t.Errorf("MCP-Protocol-Version %q: stateless %v, want %v", v, got, want)
		}
	}
}

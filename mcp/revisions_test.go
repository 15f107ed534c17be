package mcp

import (
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

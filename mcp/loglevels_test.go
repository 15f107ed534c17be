package mcp

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A call gets the live machinery only when something of it can be sent:
// its session set a log level, or it carries a progress token or a level
// of its own.
func TestWantsLiveOnlyWhenSomethingCanBeSent(t *testing.T) {
	s := New(nil, Options{Version: "test"}, hclog.NewNullLogger())
	serverT, clientT := sdk.NewInMemoryTransports()
	ss, err := s.sdk.Connect(t.Context(), serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	c := sdk.NewClient(&sdk.Implementation{Name: "levels-test", Version: "test"}, nil)
	cs, err := c.Connect(t.Context(), clientT, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	call := func(meta sdk.Meta) *sdk.CallToolRequest {
		return &sdk.CallToolRequest{Session: ss, Params: &sdk.CallToolParamsRaw{Meta: meta}}
	}
	if s.levels.wantsLive(call(nil)) {
		t.Error("a session that set no level, a call with no token: wantsLive, want not")
	}
	if !s.levels.wantsLive(call(sdk.Meta{"progressToken": "t1"})) {
		t.Error("a call with a progress token: not wantsLive")
	}
	if !s.levels.wantsLive(call(sdk.Meta{sdk.MetaKeyLogLevel: "info"})) {
		t.Error("a call with a log level in _meta: not wantsLive")
	}
	if s.levels.wantsLive(&sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{}}) {
		t.Error("a call with no session: wantsLive")
	}
	if err := cs.SetLoggingLevel(t.Context(), &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if !s.levels.wantsLive(call(nil)) {
		t.Error("a session that set its level: not wantsLive")
	}
}

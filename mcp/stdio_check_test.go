package mcp

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// plainMessage is checkLine's fast path: it must never take a line the
// SDK's own decoder refuses, since such a line ends the SDK's session.
func FuzzPlainMessage(f *testing.F) {
	for _, seed := range plainMessageCases {
		f.Add(seed.line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if !plainMessage([]byte(line)) {
			return
		}
		if _, err := jsonrpc.DecodeMessage([]byte(line)); err != nil {
			t.Fatalf("plainMessage took %q, which the SDK refuses: %v", line, err)
		}
	})
}

var plainMessageCases = []struct {
	line  string
	plain bool
}{
	{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"print(1)"}}}`, true},
	{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, true},
	{`{"jsonrpc":"2.0","id":"abc","result":{}}`, true},
	{`{"jsonrpc":"2.0","id":-42,"method":"ping","extra":true}`, true},
	{`{"jsonrpc":"2.0","id":null,"method":"x"}`, true},
	// Left to the SDK to judge: a near-miss member name, which the
	// standard decoder would match ignoring case.
	{`{"JSONRPC":"2.0","id":1,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","ID":1,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":1,"Method":"ping"}`, false},
	{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, false},
	{`{"jsonrpc":"2.0","id":1,"method":7}`, false},
	{`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`, false},
	{`{"jsonrpc":"2.0","result":{}}`, false},
	{`{"jsonrpc":"2.0","id":null,"result":{}}`, false},
	{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, false},
	{`{"jsonrpc":"2.0","id":1,"method":"ping","params":"` + "\xff" + `"}`, false},
	{`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`, false},
	{`{"jsonrpc":"2.0","id":1,"method":"ping"`, false},
	{`{"jsonrpc":"2.0","id":1,"method":"ping"} x`, false},
	{`not json`, false},
	{``, false},
}

func TestPlainMessageTakesOnlyWhatTheSDKTakes(t *testing.T) {
	for _, c := range plainMessageCases {
		got := plainMessage([]byte(c.line))
		if got != c.plain {
			t.Errorf("plainMessage(%.80q) = %v, want %v", c.line, got, c.plain)
		}
		_, sdkErr := jsonrpc.DecodeMessage([]byte(c.line))
		if got && sdkErr != nil {
			t.Errorf("plainMessage took %.80q, which the SDK refuses: %v", c.line, sdkErr)
		}
	}
}

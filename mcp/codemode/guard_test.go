package codemode

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestSSEGuard: events pass on as the SDK reads them; one past the limit
// or not a message becomes the failure of the stream's call, or is
// dropped when it is a request or notification of the server's; lines
// the SDK would end the connection at are not passed on.
func TestSSEGuard(t *testing.T) {
	const limit = 1 << 10
	big := strings.Repeat("x", 2*limit)
	stream := strings.Join([]string{
		": a comment",
		"id: prime",
		"",
		"event: message",
		"data: {\"jsonrpc\":\"2.0\",",
		"data:  \"method\":\"notifications/progress\",\"params\":{}}",
		"",
		"a line without a colon",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"" + big + "\"}}",
		"",
		"data: not json",
		"id: 7",
		"",
		"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"text\":\"" + big + "\"}}",
		"",
	}, "\n")
	g := &guard{server: "s", max: limit, log: hclog.NewNullLogger()}
	id, _ := jsonrpc.MakeID(float64(3))
	out, err := io.ReadAll(&sseGuard{guard: g, body: io.NopCloser(strings.NewReader(stream)),
		r: bufio.NewReader(strings.NewReader(stream)), call: id, isCall: true})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		events = append(events, ev)
	}
	want := []string{
		"id: prime",
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}",
		// the notification past the limit: dropped (no fields, no event)
		"id: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32090,\"message\":\"pyrun: the MCP server \\\"s\\\" answered with a message pyrun cannot read",
		"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32090,\"message\":\"pyrun: the MCP server \\\"s\\\" answered with a message past the limit of 1 KiB",
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d:\n%q", len(events), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(events[i], w) {
			t.Errorf("event %d:\n%s\nwant it to begin\n%s", i, events[i], w)
		}
	}
}

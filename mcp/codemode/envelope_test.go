package codemode

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestEnvelope: the id of the call a message answers is found wherever it
// is at the top level, in pieces, and never inside the result.
func TestEnvelope(t *testing.T) {
	big := strings.Repeat(`x\"{[`, 1000)
	for _, tc := range []struct {
		msg  string
		want any // an id's value, or nil: answers no call
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`, int64(7)},
		{`{"result":{"text":"` + big + `","id":99},"jsonrpc":"2.0","id":8}`, int64(8)},
		{`{"result":{"id":99,"method":"x"},"jsonrpc":"2.0", "id" : "s-1" }`, "s-1"},
		{`{"jsonrpc":"2.0","id":"a\"b","error":{"code":1}}`, `a"b`},
		{`{"jsonrpc":"2.0","id":5,"result":{"text":"cut off here`, int64(5)},
		{`{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}`, nil},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":3}}`, nil},
		{`{"jsonrpc":"2.0","id":{"x":1},"result":{}}`, nil},
		{`{"jsonrpc":"2.0","id":null,"result":{}}`, nil},
		{`{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 200) + `","result":{}}`, nil},
		{`[{"jsonrpc":"2.0","id":1,"result":{}}]`, nil},
		{`{"jsonrpc":"2.0","id":5,"params":{"cut off before its method`, nil}, // a request of the server's, maybe
		{`{"jsonrpc":"2.0","id":5}`, nil},
		{`not JSON at all`, nil},
		{``, nil},
	} {
		for _, step := range []int{1, 3, 1 << 20} {
			var e envelope
			for i := 0; i < len(tc.msg); i += step {
				e.feed([]byte(tc.msg[i:min(i+step, len(tc.msg))]))
			}
			id, ok := e.answerFor()
			switch {
			case tc.want == nil && ok:
				t.Errorf("%.80s: answers %v, want no call", tc.msg, id.Raw())
			case tc.want != nil && (!ok || id != mustID(t, tc.want)):
				t.Errorf("%.80s (fed %d bytes at a time): id %v %v, want %v", tc.msg, step, id.Raw(), ok, tc.want)
			}
		}
	}
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	if n, ok := v.(int64); ok {
		v = float64(n)
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

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

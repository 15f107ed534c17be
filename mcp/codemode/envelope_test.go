package codemode

import (
	"strings"
	"testing"

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

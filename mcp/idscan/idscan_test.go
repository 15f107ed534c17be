package idscan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The id scanner finds a message's own id and method wherever they are,
// fed in pieces of any size, and never takes an "id" nested in params.
func TestScanner(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	for _, tc := range []struct {
		msg        string
		id         any // nil: none
		method     string
		noAnswerID bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"python_code":"` + big + `"}}}`, 7.0, "tools/call", false},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"id":99,"x":["` + big + `",{"id":5}]},"id":"abc"}`, "abc", "tools/call", false},
		{` { "params" : {"a":"\"id\":3 \\"} , "id" : -12 , "method" : "x\"y" } `, -12.0, `x"y`, false},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + big + `"}}`, nil, "notifications/message", false},
		{`{"jsonrpc":"2.0","id":null,"method":"m"}`, nil, "m", false},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"m"}`, nil, "m", false},
		{`{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 300) + `","method":"m"}`, nil, "m", false},
		{`[{"jsonrpc":"2.0","id":1,"method":"m"}]`, nil, "", false},
		{`not json at all "id": 4`, nil, "", false},
		{`{"id":1,"params":{}}`, 1.0, "", true},
	} {
		for _, piece := range []int{1, 7, 4096, len(tc.msg)} {
			var sc Scanner
			for b := []byte(tc.msg); len(b) > 0; {
				n := min(piece, len(b))
				_, _ = sc.Write(b[:n])
				b = b[n:]
			}
			id, ok := sc.ID()
			switch {
			case tc.id == nil && ok:
				t.Errorf("%.80s (pieces of %d): id %v, want none", tc.msg, piece, id.Raw())
			case tc.id != nil && (!ok || fmt.Sprint(id.Raw()) != fmt.Sprint(tc.id)):
				if f, isFloat := tc.id.(float64); !isFloat || !ok || id.Raw() != int64(f) {
					t.Errorf("%.80s (pieces of %d): id %v %v, want %v", tc.msg, piece, id.Raw(), ok, tc.id)
				}
			}
			if m, _ := sc.Method(); m != tc.method {
				t.Errorf("%.80s (pieces of %d): method %q, want %q", tc.msg, piece, m, tc.method)
			}
		}
	}
}

// Answer finds the id of the call a message answers wherever it is at the
// top level, in pieces, and never inside the result.
func TestAnswer(t *testing.T) {
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
		{`{"jsonrpc":"2.0","result":{},"id":12`, int64(12)}, // cut off just after its id
		{`{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}`, nil},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":3}}`, nil},
		{`{"jsonrpc":"2.0","id":{"x":1},"result":{}}`, nil},
		{`{"jsonrpc":"2.0","id":null,"result":{}}`, nil},
		{`{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 300) + `","result":{}}`, nil},
		{`[{"jsonrpc":"2.0","id":1,"result":{}}]`, nil},
		{`{"jsonrpc":"2.0","id":5,"params":{"cut off before its method`, nil}, // a request of the server's, maybe
		{`{"jsonrpc":"2.0","id":5}`, nil},
		{`not JSON at all`, nil},
		{``, nil},
	} {
		for _, step := range []int{1, 3, 1 << 20} {
			var sc Scanner
			for i := 0; i < len(tc.msg); i += step {
				_, _ = sc.Write([]byte(tc.msg[i:min(i+step, len(tc.msg))]))
			}
			id, ok := sc.Answer()
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

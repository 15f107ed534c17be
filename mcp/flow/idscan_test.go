package flow

import (
	"fmt"
	"strings"
	"testing"
)

// The id scanner finds a message's own id and method wherever they are,
// fed in pieces of any size, and never takes an "id" nested in params.
func TestIDScanner(t *testing.T) {
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
			var sc IDScanner
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

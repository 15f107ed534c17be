package httpfront

import (
	"net/http/httptest"
	"testing"
)

// wantEach checks f, named name, against cases: each key an input, its
// value what f must give for it.
func wantEach(t *testing.T, name string, f func(string) string, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		if got := f(in); got != want {
			t.Errorf("%s(%q) = %q, want %q", name, in, got, want)
		}
	}
}

func TestCleanPrefix(t *testing.T) {
	wantEach(t, "cleanPrefix", cleanPrefix, map[string]string{
		"":             "",
		"/":            "",
		"/pyrun":       "/pyrun",
		"/pyrun/":      "/pyrun",
		" /a/b ":       "/a/b",
		"pyrun":        "",
		"//host":       "",
		"/a/../b":      "",
		"/a/./b":       "",
		"/a?x=1":       "",
		"/a#f":         "",
		"/a%2f":        "",
		"/a\\b":        "",
		"/a b":         "",
		"http://h/a":   "",
		"/a\r\nX-Y: z": "",
	})
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

// The session id of an HTTP+SSE stream is read from its endpoint event,
// wherever the event is in a write.
func TestEndpointSessionID(t *testing.T) {
	fromWrite := func(in string) string { return endpointSessionID([]byte(in)) }
	wantEach(t, "endpointSessionID", fromWrite, map[string]string{
		"event: endpoint\ndata: /sse?sessionid=ABC\n\n":          "ABC",
		": hi\n\nevent: endpoint\ndata: /p/sse?sessionid=x1\n\n": "x1",
		"event: message\ndata: {}\n\n":                           "",
		"event: endpoint\ndata: /sse\n\n":                        "",
		"event: endpoint\ndata: %zz?sessionid=1\n\n":             "",
	})
}

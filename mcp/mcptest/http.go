package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// InitBody is an initialize request of MCP 2025-06-18, a revision of
// sessions.
const InitBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// CallBody is a tools/call request of run_python_code with code.
func CallBody(id any, code string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "run_python_code", "arguments": map[string]any{"python_code": code}}})
	return string(b)
}

// Post POSTs one JSON-RPC message to base's /mcp, in session when not "".
func Post(ctx context.Context, hc *http.Client, base, session, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/mcp", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	return hc.Do(req)
}

// OpenSession initializes a Streamable HTTP session at base by hand (as a
// client that keeps no event stream open): its id, or "" with the status
// and body of the answer when it was refused.
func OpenSession(t testing.TB, hc *http.Client, base string) (id string, status int, body string) {
	t.Helper()
	resp, err := Post(t.Context(), hc, base, "", InitBody)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode == http.StatusOK && id != "" {
		r, err := Post(t.Context(), hc, base, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
	}
	return id, resp.StatusCode, string(b)
}

// ParseMetrics reads a /metrics page into series -> value, each series
// written as in the exposition format: name{label="value",...}.
func ParseMetrics(t testing.TB, page io.Reader) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	sc := bufio.NewScanner(page)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m
}

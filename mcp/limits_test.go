package mcp

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A request body is bounded: twice --max-code (code and globals, each at
// most max-code) plus 1 MiB for the JSON around them, at least 4 MiB.
// Larger bodies are refused before any of it is decoded.
func TestRequestBodyLimit(t *testing.T) {
	for _, tc := range []struct {
		maxCode  int
		size     int
		accepted bool
	}{
		{1 << 10, 3 << 20, true},   // under the 4 MiB floor
		{1 << 10, 5 << 20, false},  // over it
		{8 << 20, 16 << 20, true},  // under 2*8 MiB + 1 MiB
		{8 << 20, 18 << 20, false}, // over it
	} {
		h := New(nil, Options{MaxCode: tc.maxCode}, testLogger(t)).HTTPHandler(HTTPOptions{})
		ts := httptest.NewServer(h)
		// A valid initialize request, padded with whitespace to size.
		msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		body := append(bytes.Repeat([]byte(" "), tc.size-len(msg)), msg...)
		req, _ := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		ts.Close()
		if ok := resp.StatusCode == http.StatusOK; ok != tc.accepted {
			t.Errorf("max-code %d, body of %d MiB: %d %s; want accepted %v", tc.maxCode, tc.size>>20, resp.StatusCode, text, tc.accepted)
		}
	}
}

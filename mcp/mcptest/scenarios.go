package mcptest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Scenarios of the HTTP front end, run by both tiers: the fast one against
// pyrun's server on a stand-in pool (mcp/httpfront), the full one against
// the pyrun binary with real workers (cmd/pyrun), so that one behaviour is
// checked one way. A Front says where the front end is and how to read it.

// Front is a front end under test.
type Front struct {
	// Base is its URL: http://host:port.
	Base string
	// Metrics scrapes its /metrics.
	Metrics func(t *testing.T) map[string]float64
}

// SessionCaps checks a front end started with a cap of 5 MCP sessions and
// of 3 for one client; a, b and c are three clients of it. A client at its
// cap has its session idle the longest closed to make room for a new one;
// past the cap of all, a new session is refused with an error naming the
// cap; /healthz and /metrics show the figures. (50,000 initialize
// requests took pyrun to 1.68 GB before.)
func SessionCaps(t *testing.T, f Front, a, b, c *http.Client) {
	t.Helper()
	var first string
	for i := range 4 {
		id, code, body := OpenSession(t, a, f.Base)
		if id == "" {
			t.Fatalf("client a's session %d: %d %s", i+1, code, body)
		}
		if i == 0 {
			first = id
		}
	}
	// The fourth evicted the first, idle the longest; the SDK closes it on
	// a goroutine of its own.
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := Post(t.Context(), a, f.Base, first, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client a's first session after its fourth opened: %d, want 404 (evicted)", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond) // polling what the server shows, not synchronising
	}
	for range 2 {
		if id, code, body := OpenSession(t, b, f.Base); id == "" {
			t.Fatalf("client b's session: %d %s", code, body)
		}
	}
	id, code, body := OpenSession(t, c, f.Base)
	if id != "" || code != http.StatusServiceUnavailable || !strings.Contains(body, "max_mcp_sessions") {
		t.Errorf("a sixth session: %d %q, want 503 naming max_mcp_sessions", code, body)
	}
	resp, err := http.Get(f.Base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h["mcp_sessions"] != 5.0 || h["mcp_sessions_max"] != 5.0 {
		t.Errorf("/healthz: mcp_sessions %v of %v, want 5 of 5", h["mcp_sessions"], h["mcp_sessions_max"])
	}
	m := f.Metrics(t)
	if m[`pyrun_mcp_sessions_refused_total{cap="total"}`] != 1 || m["pyrun_mcp_sessions_evicted_total"] != 1 || m["pyrun_mcp_sessions_max"] != 5 {
		t.Errorf("metrics: refused %v, evicted %v, max %v; want 1, 1 and 5", m[`pyrun_mcp_sessions_refused_total{cap="total"}`],
			m["pyrun_mcp_sessions_evicted_total"], m["pyrun_mcp_sessions_max"])
	}
}

// DeleteStopsCalls checks that DELETE of a session while its call runs
// (running returns once the call runs) stops the call, answers the call's
// POST with an error result, then ends the session. (Before, DELETE waited
// for the call and the POST got an empty 200.)
func DeleteStopsCalls(t *testing.T, f Front, running func(t *testing.T)) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Minute}
	id, code, body := OpenSession(t, hc, f.Base)
	if id == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	type answer struct {
		status int
		body   string
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := Post(context.WithoutCancel(t.Context()), hc, f.Base, id, CallBody(7, "import time\ntime.sleep(60)"))
		if err != nil {
			got <- answer{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- answer{resp.StatusCode, string(b)}
	}()
	running(t)
	began := time.Now()
	status := deleteSession(t, hc, f.Base, id)
	took := time.Since(began)
	a := <-got
	if status != http.StatusNoContent || took > 20*time.Second {
		t.Errorf("DELETE: %d after %s, want 204 well before the call's 60 s", status, took.Round(time.Millisecond))
	}
	if a.status != http.StatusOK || !strings.Contains(a.body, `"isError":true`) || !strings.Contains(a.body, "ended the MCP session") ||
		!strings.Contains(a.body, `"id":7`) {
		t.Errorf("the call's POST: %d %.300q, want its result: an error saying the session was ended", a.status, a.body)
	}
	if n := f.Metrics(t)["pyrun_calls_stopped_by_delete_total"]; n != 1 {
		t.Errorf("pyrun_calls_stopped_by_delete_total = %v, want 1", n)
	}
	// The session is gone: its next request is refused.
	r, err := Post(t.Context(), hc, f.Base, id, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("a request to the deleted session: %d, want 404", r.StatusCode)
	}
}

// deleteSession sends DELETE for session id; its status.
func deleteSession(t *testing.T, hc *http.Client, base, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "DELETE", base+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Stateless checks a front end serving /mcp without sessions: an
// initialize gets no Mcp-Session-Id, and a GET for a session's stream is
// refused.
func Stateless(t *testing.T, f Front) {
	t.Helper()
	resp, err := Post(t.Context(), http.DefaultClient, f.Base, "", InitBody)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("stateless initialize: %s, Mcp-Session-Id %q; want 200 and none", resp.Status, resp.Header.Get("Mcp-Session-Id"))
	}
	if resp, err := http.Get(f.Base + "/mcp"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("stateless GET /mcp: %s, want 405", resp.Status)
	}
}

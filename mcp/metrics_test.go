package mcp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/codemode/codemodetest"
	"github.com/pyrun/pyrun/supervisor"
)

// scrape returns the /metrics page of m.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// series lists the lines of page that are samples of metric.
func series(page, metric string) []string {
	var out []string
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, metric+"{") {
			out = append(out, line)
		}
	}
	return out
}

// TestToolCallLabelsComeFromConfig: code that calls made-up servers, a
// new name each call, adds no label values: they are all counted as
// server="other". A configured server keeps its own.
func TestToolCallLabelsComeFromConfig(t *testing.T) {
	cmd, args := codemodetest.Command(t, "memory")
	hub := codemode.New(codemode.Options{MaxCalls: 5000}, "test", testLogger(t))
	hub.Configure(map[string]codemode.Server{"memory": {Command: cmd, Args: args, Allow: []string{"read_graph"},
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "m.jsonl")}}})
	t.Cleanup(hub.Close)
	m := NewMetrics("test", func() supervisor.Stats { return supervisor.Stats{} })
	m.CodeMode(hub)
	before := len(scrape(t, m))

	caller, _ := hub.ForRun(t.Context(), "run-1")
	if _, err := caller.Call(t.Context(), "memory", "read_graph", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("a call to the configured server: %v", err)
	}
	const madeUp = 3000
	for i := range madeUp {
		server := fmt.Sprintf("made-up-%d-%s", i, strings.Repeat("x", 100))
		if _, err := caller.Call(t.Context(), server, "t", json.RawMessage(`{}`)); err == nil {
			t.Fatalf("a call to %s succeeded", server)
		}
	}
	page := scrape(t, m)
	want := map[string]bool{
		`pyrun_tool_calls_total{server="memory",status="ok"} 1`:                               true,
		fmt.Sprintf(`pyrun_tool_calls_total{server="other",status="not-allowed"} %d`, madeUp): true,
	}
	got := series(page, "pyrun_tool_calls_total")
	for _, line := range got {
		if !want[line] {
			t.Errorf("unexpected series %s", line)
		}
		delete(want, line)
	}
	for line := range want {
		t.Errorf("missing series %s", line)
	}
	if n := len(series(page, "pyrun_tool_call_duration_seconds_count")); n != 2 {
		t.Errorf("%d duration series, want 2 (memory, other)", n)
	}
	// The page grew by the two servers' series, not by the calls.
	if grew := len(page) - before; grew > 8<<10 {
		t.Errorf("/metrics grew by %d bytes over %d calls to made-up servers", grew, madeUp)
	}
}

// TestCallLabelsBounded: a status or language pyrun did not name in
// advance is counted as "other".
func TestCallLabelsBounded(t *testing.T) {
	m := NewMetrics("test", func() supervisor.Stats { return supervisor.Stats{} })
	began := time.Now()
	for i := range 50 {
		m.observe(t.Context(), began, fmt.Sprintf("lang-%d", i), supervisor.Result{Status: supervisor.Status(fmt.Sprintf("st-%d", i))}, nil)
	}
	m.observe(t.Context(), began, "python", supervisor.Result{Status: supervisor.StatusSuccess}, nil)
	page := scrape(t, m)
	for _, line := range append(series(page, "pyrun_calls_total"), series(page, "pyrun_language_calls_total")...) {
		if strings.Contains(line, `"lang-`) || strings.Contains(line, `"st-`) {
			t.Errorf("a label value from outside: %s", line)
		}
	}
	for _, want := range []string{
		`pyrun_calls_total{status="other"} 50`,
		`pyrun_language_calls_total{language="other",status="other"} 50`,
		`pyrun_language_calls_total{language="python",status="success"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestClientWorkersBounded: pyrun_client_workers names the first
// MaxClients clients by name, and sums the rest as "other".
func TestClientWorkersBounded(t *testing.T) {
	clients := map[string]supervisor.ClientWorkers{"a-alice": {Idle: 1, Busy: 2}, "b-bob": {Busy: 1}}
	for i := range 40 {
		clients[fmt.Sprintf("c%02d", i)] = supervisor.ClientWorkers{Idle: 1}
	}
	m := NewMetrics("test", func() supervisor.Stats { return supervisor.Stats{Fresh: 2, Clients: clients} })
	m.MaxClients(3)
	page := scrape(t, m)
	got := series(page, "pyrun_client_workers")
	for _, want := range []string{
		`pyrun_client_workers{client="a-alice",state="busy"} 2`,
		`pyrun_client_workers{client="a-alice",state="idle"} 1`,
		`pyrun_client_workers{client="b-bob",state="busy"} 1`,
		`pyrun_client_workers{client="c00",state="idle"} 1`,
		`pyrun_client_workers{client="other",state="idle"} 39`,
		`pyrun_workers_fresh 2`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if len(got) != 8 {
		t.Errorf("pyrun_client_workers has %d series, want 8 (4 clients, other included, 2 states): %v", len(got), got)
	}
}

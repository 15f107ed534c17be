package supervisor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
)

// A traced call's log line names its trace and span (Job.TraceID, SpanID),
// so that a log search finds the call a trace shows, on the pool's workers
// and on a session's own; an untraced call's line has neither field.
func TestCallLineCarriesTrace(t *testing.T) {
	var out bytes.Buffer // hclog serialises writes; read after Close
	log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info, JSONFormat: true})
	p := supervisor.NewPoolWithCommand(fakeCommand("echo"), supervisor.Config{Workers: 1}, log)
	const traceID, spanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "traced", Code: "1", TraceID: traceID, SpanID: spanID}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(t.Context(), supervisor.Job{ID: "plain", Code: "1"}, nil); err != nil {
		t.Fatal(err)
	}
	// A session's call, on a worker of its own, logs its line there.
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(t.Context(), supervisor.Job{ID: "session", Code: "1", TraceID: traceID, SpanID: spanID}, nil); err != nil {
		t.Fatal(err)
	}
	d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil { // writes the queued call lines
		t.Fatal(err)
	}
	lines := map[string]map[string]any{}
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == "call" {
			lines[rec["id"].(string)] = rec
		}
	}
	for _, id := range []string{"traced", "session"} {
		if got := lines[id]; got["trace_id"] != traceID || got["span_id"] != spanID {
			t.Errorf("the %s call's line: %v, want trace_id %s and span_id %s", id, got, traceID, spanID)
		}
	}
	got, ok := lines["plain"]
	if !ok {
		t.Fatalf("no line for the untraced call in:\n%s", out.String())
	}
	if _, has := got["trace_id"]; has {
		t.Errorf("the untraced call's line has a trace_id: %v", got)
	}
}

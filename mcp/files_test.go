package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// filesArg is a files argument of n empty entries, each in a folder of
// its own (f0/x, f1/x, ...): the shape that cost the quadratic check most.
func filesArg(n int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"f%d/x":""`, i)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// The files check is linear in the entries (a sort aside): 40,000 empty
// entries, which cost the pairwise check 24 s of CPU, take well under a
// second.
func TestDecodeFilesIsLinear(t *testing.T) {
	raw := filesArg(40_000)
	began := time.Now()
	files, err := decodeFiles(t.Context(), raw, 1<<20, 50_000)
	took := time.Since(began)
	if err != nil || len(files) != 40_000 {
		t.Fatalf("decodeFiles: %d files, %v", len(files), err)
	}
	if took > 3*time.Second {
		t.Errorf("40,000 entries took %s to check; want well under a second", took)
	}
}

// A files argument with more entries than max_input_files is refused with
// an error naming the limit; as many as the limit pass.
func TestDecodeFilesBoundsEntries(t *testing.T) {
	if _, err := decodeFiles(t.Context(), filesArg(DefaultMaxInputFiles), 1<<20, 0); err != nil {
		t.Errorf("%d entries, the default limit: %v", DefaultMaxInputFiles, err)
	}
	_, err := decodeFiles(t.Context(), filesArg(DefaultMaxInputFiles+1), 1<<20, 0)
	if err == nil || !errors.Is(err, errTooManyInputFiles) || !strings.Contains(err.Error(), "max_input_files") ||
		!strings.Contains(err.Error(), fmt.Sprint(DefaultMaxInputFiles)) {
		t.Errorf("%d entries: %v; want an error naming max_input_files and its value", DefaultMaxInputFiles+1, err)
	}
	if _, err := decodeFiles(t.Context(), filesArg(11), 1<<20, 10); err == nil || !strings.Contains(err.Error(), "10 entries") {
		t.Errorf("11 entries under a limit of 10: %v", err)
	}
}

// Sorting and comparing neighbours finds every path that is both a file
// and a folder, also when other paths sort between them ("a!" sorts
// between "a" and "a/b" byte by byte), and every path given twice.
func TestDecodeFilesFindsConflicts(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // "" for accepted
	}{
		{`{"a":"x","a!":"y","a/b":"z"}`, `"a" is a file and a folder of "a/b"`},
		{`{"a/b/c":"x","a!":"","a/b":"z","a.txt":""}`, `"a/b" is a file and a folder of "a/b/c"`},
		{`{"d/x":"1","d/y":"2","d!":"3","e":"4"}`, ""},
		{`{"ab":"1","a/b":"2","a":"3"}`, `"a" is a file and a folder of "a/b"`},
		{`{"a":"1","a":"2"}`, `"a" is given twice`},
	} {
		_, err := decodeFiles(t.Context(), []byte(tc.raw), 1<<20, 0)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.raw, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want %q", tc.raw, err, tc.want)
		}
	}
}

// The check stops when the request's context ends: its client has gone.
func TestDecodeFilesStopsWithItsRequest(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	gone := errors.New("the client went away")
	cancel(gone)
	_, err := decodeFiles(ctx, filesArg(900), 1<<20, 0)
	if !errors.Is(err, gone) {
		t.Errorf("decodeFiles with its context ended: %v; want the context's cause", err)
	}
}

// Over the MCP front end: a call with too many files gets a tool error
// naming the limit (--max-input-files), counted in
// pyrun_requests_refused_total{limit="max_input_files"}, and never reaches
// the pool.
func TestTooManyInputFilesIsAToolError(t *testing.T) {
	rec := &jobRecorder{}
	s := New(rec, Options{MaxInputFiles: 5}, testLogger(t))
	cs := connectServer(t, s)
	files := map[string]any{}
	for i := range 6 {
		files[fmt.Sprintf("f%d.txt", i)] = "x"
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName,
		Arguments: map[string]any{"python_code": "1", "files": files}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !res.IsError || !strings.Contains(text, "max_input_files") || !strings.Contains(text, "5 entries") {
		t.Errorf("a call with 6 files under a limit of 5: %q; want a tool error naming max_input_files", text)
	}
	if n := refusedCount(t, s, "max_input_files"); n != 1 {
		t.Errorf("pyrun_requests_refused_total{limit=max_input_files} is %v, want 1", n)
	}
	delete(files, "f5.txt")
	if res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName,
		Arguments: map[string]any{"python_code": "1", "files": files}}); err != nil || res.IsError {
		t.Errorf("a call with 5 files under a limit of 5: %v %v", err, res)
	}
	if len(rec.jobs) != 1 || len(rec.jobs[0].Files) != 5 {
		t.Errorf("the pool got %d calls, want 1 with 5 files", len(rec.jobs))
	}
}

// refusedCount reads pyrun_requests_refused_total{limit=limit} of s.
func refusedCount(t *testing.T, s *Server, limit string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.front.counters.Refused)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no pyrun_requests_refused_total{limit=%q}", limit)
	return 0
}

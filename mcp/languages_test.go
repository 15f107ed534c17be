package mcp

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

// R's and JavaScript's tools as package lang makes them (its tests hold
// its tools to the names here).
var (
	testR = Language{
		Name: "r", Title: "R", Article: "an", Tool: "run_r_code", CodeArg: "r_code", Describe: DescribeR,
	}
	testJavaScript = Language{
		Name: "javascript", Title: "JavaScript", Article: "a", Tool: "run_javascript_code", CodeArg: "javascript_code",
		Describe: DescribeJavaScript, LeavesRunning: "a timer, a promise",
	}
)

// run_python_code is what it was before languages: its name, schemas,
// annotations and description (testdata/run_python_code.json, recorded
// from the tool as it was).
func TestPythonToolIsUnchanged(t *testing.T) {
	want, err := os.ReadFile("testdata/run_python_code.json")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{PythonVersion: "3.14.2", PyodideVersion: "314.0.7", Timeout: 30 * time.Second, MaxOutput: 65536, Network: "public"}
	got, err := json.Marshal(languageToolDef(Python, opts))
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("run_python_code changed:\n got %s\nwant %s", got, want)
	}
}

// Another language's tool takes its own code argument and the shared
// ones, and neither Python's code argument nor global_variables; the fast
// and the checked parsers agree.
func TestLanguageToolArguments(t *testing.T) {
	lt := newLanguageTools([]Language{testR})["run_r_code"]
	if lt == nil {
		t.Fatal("no run_r_code tool")
	}
	for _, tc := range []struct {
		raw, code, err string
	}{
		{raw: `{"r_code":"1 + 1"}`, code: "1 + 1"},
		{raw: `{"r_code":"x","timeout_seconds":2,"session_id":"new","files":{"a.csv":"1,2"}}`, code: "x"},
		{raw: `{"r_code":"","session_id":"s.1","end_session":true}`, code: ""},
		{raw: `{"python_code":"1"}`, err: "python_code"},
		{raw: `{"r_code":"1","global_variables":{"a":1}}`, err: "global_variables"},
		{raw: `{"r_code":1}`, err: "r_code"},
		{raw: `{"r_code":"1","end_session":true}`, err: "end_session needs the session_id"},
		{raw: `{"r_code":"` + strings.Repeat("x", 2048) + `"}`, err: "r_code is 2048 bytes"},
	} {
		args, err := parseArgsFor(json.RawMessage(tc.raw), 1024, lt)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one naming %q", tc.raw, err, tc.err)
			}
			continue
		}
		if err != nil || args.PythonCode != tc.code {
			t.Errorf("%s: code %q, error %v; want %q", tc.raw, args.PythonCode, err, tc.code)
		}
		fast, ok := parseValidArgsFor(json.RawMessage(tc.raw), "r_code", false)
		checked, cerr := parseArgsCheckedFor(json.RawMessage(tc.raw), lt)
		if !ok || cerr != nil || !reflect.DeepEqual(fast, checked) {
			t.Errorf("%s: fast %+v (%v), checked %+v (%v)", tc.raw, fast, ok, checked, cerr)
		}
	}
	schema, _ := json.Marshal(inputSchemaFor(testR))
	for _, want := range []string{`"r_code"`, `"required":["r_code"]`, `to start an R session`, `"x-mcp-header":"Session-Id"`} {
		if !strings.Contains(string(schema), want) {
			t.Errorf("run_r_code schema %s lacks %s", schema, want)
		}
	}
	if strings.Contains(string(schema), "python") || strings.Contains(string(schema), "global_variables") {
		t.Errorf("run_r_code schema %s speaks of Python", schema)
	}
}

// jobRecorder is the Runner of a language whose engine this branch does
// not build: it answers every call and keeps the jobs it was given.
type jobRecorder struct {
	mu   sync.Mutex
	jobs []supervisor.Job
}

func (r *jobRecorder) Run(_ context.Context, job supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
	r.mu.Lock()
	r.jobs = append(r.jobs, job)
	r.mu.Unlock()
	return supervisor.Result{ID: job.ID, Status: supervisor.StatusSuccess, Value: `"ok"`}, nil
}

func connectServer(t *testing.T, s *Server) *sdk.ClientSession {
	t.Helper()
	serverT, clientT := sdk.NewInMemoryTransports()
	ss, err := s.sdk.Connect(t.Context(), serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "languages-test", Version: "test"}, nil).Connect(t.Context(), clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A server has the tools of its languages and no others; a language's
// call reaches the runner as a job of that language, with the code of its
// own argument and no globals or code mode tools.
func TestServerServesItsLanguagesOnly(t *testing.T) {
	rec := &jobRecorder{}
	opts := Options{Version: "test", Timeout: 30 * time.Second, MaxOutput: 64 << 10, Languages: []Language{testR}}
	s := New(rec, opts, hclog.NewNullLogger())
	cs := connectServer(t, s)
	if got := mcptest.ToolNames(t, cs); !slices.Equal(got, []string{"run_r_code"}) {
		t.Fatalf("tools %v, want run_r_code alone", got)
	}
	if got := cs.InitializeResult().Instructions; !strings.Contains(got, `"run_r_code"`) || strings.Contains(got, "python") {
		t.Errorf("instructions %q", got)
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_r_code",
		Arguments: map[string]any{"r_code": "1 + 1", "timeout_seconds": 2}})
	if err != nil || res.IsError {
		t.Fatalf("run_r_code: %v %+v", err, res)
	}
	if !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "<status>success</status>") {
		t.Errorf("result text %q is not the usual format", res.Content[0].(*sdk.TextContent).Text)
	}
	rec.mu.Lock()
	job := rec.jobs[0]
	rec.mu.Unlock()
	if job.Language != "r" || job.Code != "1 + 1" || job.Globals != nil || job.Catalog != nil || job.Timeout != 2*time.Second {
		t.Errorf("job %+v, want an r job of 1 + 1 with a 2s limit", job)
	}
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": "1"}})
	if err == nil && !res.IsError {
		t.Errorf("run_python_code answered on a server without Python: %+v", res)
	}
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_r_code", Arguments: map[string]any{"r_code": "1", "session_id": "x.y"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "R sessions") {
		t.Errorf("a session call without sessions: %v %+v", err, res)
	}

	both := New(rec, Options{Version: "test", Languages: []Language{Python, testJavaScript}}, hclog.NewNullLogger())
	if got := mcptest.ToolNames(t, connectServer(t, both)); !slices.Equal(got, []string{"run_javascript_code", "run_python_code"}) {
		t.Errorf("tools %v, want run_javascript_code and run_python_code", got)
	}
	if got := mcptest.ToolNames(t, connectServer(t, New(rec, Options{Version: "test"}, hclog.NewNullLogger()))); !slices.Equal(got, []string{"run_python_code"}) {
		t.Errorf("tools without Languages %v, want run_python_code alone", got)
	}
}

// run_r_code's description says what an R user needs beyond the generic
// one: the limits, the JSON forms, plots as images, the packages there are.
func TestRToolDescription(t *testing.T) {
	r := testR
	r.Versions = map[string]string{"r": "4.6.0", "webr": "0.6.0"}
	desc := languageToolDef(r, Options{Timeout: 30 * time.Second, MaxOutput: 65536}).Description
	for _, want := range []string{
		"Run R code", "r 4.6.0, webr 0.6.0", "30s", "data frame as an array of row objects",
		"Plots come back as images", "install.packages() cannot work",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("run_r_code description lacks %q:\n%s", want, desc)
		}
	}
}

// run_javascript_code's description names the pyrun object, the only way
// the code has to files, and what the sandbox refuses.
func TestJavaScriptDescription(t *testing.T) {
	l := testJavaScript
	l.Versions = map[string]string{"deno": "2.9.6", "typescript": "6.0.3"}
	d := l.Describe(l, Options{MaxOutput: 65536, Timeout: 30 * time.Second, Sessions: SessionOptions{Max: 4, Idle: time.Minute, MaxAge: time.Hour}})
	for _, want := range []string{
		"JavaScript or TypeScript", "in Deno 2.9.6", "top-level await", "no permissions",
		"pyrun.readTextFile(path)", `pyrun.writeFile("/output/`, "pyrun.display(data, mimeType)",
		"64 KiB each", "after 30s", `session_id "new"`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "mounted") || strings.Contains(d, "readDir") {
		t.Errorf("without mounts the description tells of some:\n%s", d)
	}
	d = l.Describe(l, Options{MaxOutput: 65536, Timeout: 30 * time.Second, Mounts: []string{"/data", "/scratch (writable)"}})
	for _, want := range []string{"no files but the mounted folders below", "at: /data, /scratch (writable).", "pyrun.readDir(path)", "writes into a writable one"} {
		if !strings.Contains(d, want) {
			t.Errorf("description with mounts lacks %q:\n%s", want, d)
		}
	}
}

// A disabled language's tool is not listed, and a call of it is told that
// the tool exists and which --languages serves it; a tool pyrun has not
// at all is still an unknown tool.
func TestDisabledLanguageToolSaysSo(t *testing.T) {
	rec := &jobRecorder{}
	cs := connectServer(t, New(rec, Options{Version: "test", Disabled: []Language{testR, testJavaScript}}, hclog.NewNullLogger()))
	if got := mcptest.ToolNames(t, cs); !slices.Equal(got, []string{"run_python_code"}) {
		t.Fatalf("tools %v, want run_python_code alone", got)
	}
	_, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_r_code", Arguments: map[string]any{"r_code": "1"}})
	want := `tool "run_r_code" runs R code, and R is not served here: this pyrun was started with --languages python; start it with --languages python,r for the tool`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("run_r_code on a server without R: %v\nwant %s", err, want)
	}
	_, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_cobol_code", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), `unknown tool "run_cobol_code"`) {
		t.Errorf("a tool pyrun does not have: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.jobs) != 0 {
		t.Errorf("jobs ran: %+v", rec.jobs)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

// ---- helpers for any language's end-to-end tests ---------------------------

// newLanguageServer starts `pyrun stdio --languages languages` with args
// and a real go-sdk client; it stops with the test. The R and JavaScript
// e2e tests use it as the Python ones use newServer.
func newLanguageServer(t *testing.T, languages string, args ...string) *server {
	t.Helper()
	return newServer(t, append([]string{"--languages", languages}, args...)...)
}

// toolDescription is the description the server lists for tool.
func (s *server) toolDescription(t *testing.T, tool string) string {
	t.Helper()
	res, err := s.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == tool {
			return tl.Description
		}
	}
	t.Fatalf("no tool %s listed", tool)
	return ""
}

// callToolRaw calls tool with args. Safe from any goroutine.
func (s *server) callToolRaw(ctx context.Context, tool string, args map[string]any) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return s.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
}

// callTool calls tool with args and checks the invariants every result of
// a call that ran must hold (checkResult), as call does for Python.
func (s *server) callTool(ctx context.Context, tool string, args map[string]any) (result, error) {
	res, err := s.callToolRaw(ctx, tool, args)
	if err != nil {
		return result{}, err
	}
	return checkResult(res)
}

// runIn runs code with tool, whose code argument is codeArg
// ("r_code", "javascript_code"), and fails the test if no result comes.
func (s *server) runIn(t *testing.T, tool, codeArg, code string) result {
	t.Helper()
	r, err := s.callTool(t.Context(), tool, map[string]any{codeArg: code})
	if err != nil {
		t.Fatalf("%s %q: %v", tool, code, err)
	}
	return r
}

// ---- tests ------------------------------------------------------------------

// TestLanguageFlags: --languages and the per-language pool flags, from
// the command line and as config keys, and their bad values.
func TestLanguageFlags(t *testing.T) {
	o, _, err := loadOptions("stdio", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, js := o.pool(lang.R), o.pool(lang.JavaScript)
	if !slices.Equal(o.languages, []string{"python"}) || r.workers != 1 || js.workers != 1 ||
		r.memoryLimit != 1<<30 || js.memoryLimit != 512<<20 || o.runLanguage != "python" {
		t.Errorf("defaults: languages %v, r-workers %d, js-workers %d, r-memory-limit %s, js-memory-limit %s, language %s",
			o.languages, r.workers, js.workers, r.memoryLimit, js.memoryLimit, o.runLanguage)
	}
	if py := o.pool(lang.Python); py.workers != supervisor.DefaultWorkers() || py.memoryLimit != 512<<20 {
		t.Errorf("defaults: workers %d, memory-limit %s", py.workers, py.memoryLimit)
	}
	langs := o.enabledLanguages()
	if len(langs) != 1 || langs[0].ID != "python" || langs[0].Tool(nil).Tool != "run_python_code" {
		t.Fatalf("enabled languages %+v, want python alone", langs)
	}
	// A pool's configuration is the pools' settings with its own size.
	want := o.supervisor
	want.Workers, want.MemoryLimit = supervisor.DefaultWorkers(), 512<<20
	want.MaxFiles, want.MaxFileBytes, want.Checkpoints = 256, 64<<20, true
	if got := o.poolConfig(langs[0]); !slicesEqualConfig(got, want) {
		t.Errorf("python's pool config %+v, want %+v", got, want)
	}
	if got := o.poolConfig(lang.R); got.Workers != 1 || got.MemoryLimit != 1<<30 || got.Timeout != want.Timeout {
		t.Errorf("R's pool config %+v: want 1 worker, 1GiB and the pools' timeout", got)
	}

	cfgFile := filepath.Join(t.TempDir(), "pyrun.json")
	if err := writeFile(cfgFile, `{"languages": ["python"], "r_workers": 3, "js_workers": 2, "r_memory_limit": "2GiB", "js_memory_limit": "256MiB"}`); err != nil {
		t.Fatal(err)
	}
	o, _, err = loadOptions("stdio", []string{"--config", cfgFile, "--js-workers", "4"})
	if err != nil {
		t.Fatal(err)
	}
	if r, js := o.pool(lang.R), o.pool(lang.JavaScript); r.workers != 3 || js.workers != 4 || r.memoryLimit != 2<<30 || js.memoryLimit != 256<<20 {
		t.Errorf("from the file: r-workers %d, js-workers %d (the flag wins), r-memory-limit %s, js-memory-limit %s",
			r.workers, js.workers, r.memoryLimit, js.memoryLimit)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--languages", ""}, "at least one language"},
		{[]string{"--languages", "python,python"}, "python is named twice"},
		{[]string{"--languages", "python,cobol"}, `unknown language "cobol"`},
		{[]string{"--languages", "julia"}, "no WebAssembly build"},
		{[]string{"--language", "cobol"}, `unknown language "cobol"`},
		{[]string{"--r-workers", "0"}, "r-workers must be between 1 and 256"},
		{[]string{"--js-workers", "300"}, "js-workers must be between 1 and 256"},
		{[]string{"--r-memory-limit", "64MiB"}, "r-memory-limit must be at least 128MiB"},
		{[]string{"--js-memory-limit", "1MiB"}, "js-memory-limit must be at least 128MiB"},
	} {
		_, _, err := loadOptions("stdio", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// slicesEqualConfig compares pool configurations, which hold slices.
func slicesEqualConfig(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestLanguagesPythonOnly: with --languages python the server lists
// run_python_code alone, and it runs as ever; a call of another
// language's tool is told how to turn it on.
func TestLanguagesPythonOnly(t *testing.T) {
	s := newLanguageServer(t, "python", "--workers", "1")
	if got := mcptest.ToolNames(t, s.session); !slices.Equal(got, []string{"run_python_code"}) {
		t.Fatalf("tools %v, want run_python_code alone", got)
	}
	r := s.runIn(t, "run_python_code", "python_code", "print('hi')\n6 * 7")
	wantStatus(t, r, "success")
	wantValue(t, r, "42")
	for tool, want := range map[string]string{
		"run_r_code":          `tool "run_r_code" runs R code, and R is not served here: this pyrun was started with --languages python; start it with --languages python,r for the tool`,
		"run_javascript_code": "start it with --languages python,javascript for the tool",
	} {
		res, err := s.callToolRaw(t.Context(), tool, map[string]any{"r_code": "1"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s with the language off: %v %+v; want an error saying %q", tool, err, res, want)
		}
	}
}

// TestUnknownLanguageIsRefused: pyrun does not start with a language it
// cannot run, and says which it can.
func TestUnknownLanguageIsRefused(t *testing.T) {
	needBinary(t)
	for _, args := range [][]string{
		{"stdio", "--languages", "python,cobol"},
		{"serve", "--languages", "cobol"},
		{"warmup", "--languages", "cobol"},
		{"run", "--language", "cobol", "-"},
	} {
		_, stderr, code := pyrunCmd(t, "1", args...)
		if code != exitUsage || !strings.Contains(stderr, `unknown language "cobol"`) || !strings.Contains(stderr, "python") {
			t.Errorf("pyrun %v: exit %d, stderr %q; want %d and the languages it runs", args, code, stderr, exitUsage)
		}
	}
	_, stderr, code := pyrunCmd(t, "", "stdio", "--languages", "julia")
	if code != exitUsage || !strings.Contains(stderr, "Julia has no WebAssembly build") {
		t.Errorf("--languages julia: exit %d, stderr %q", code, stderr)
	}
}

// TestRunLanguagePython: pyrun run --language python runs the file.
func TestRunLanguagePython(t *testing.T) {
	needBinary(t)
	file := filepath.Join(t.TempDir(), "x.py")
	if err := os.WriteFile(file, []byte("print('from a file')\n2 + 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := pyrunCmd(t, "", "run", "--language", "python", file)
	if code != 0 || !strings.Contains(stdout, "from a file") || !strings.Contains(stdout, "<return_value>\n4\n</return_value>") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestServeLanguageHealthAndMetrics: /healthz and /metrics give each
// language's pool, labelled with the language, besides the totals.
func TestServeLanguageHealthAndMetrics(t *testing.T) {
	srv := startServe(t, "--workers", "1", "--languages", "python")
	c := srv.connect(t, "mcp", "", nil)
	wantStatus(t, c.run(t, "1 + 1"), "success")

	resp, err := http.Get(srv.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Status    string `json:"status"`
		Languages map[string]struct {
			Status       string `json:"status"`
			WorkersReady int    `json:"workers_ready"`
			WorkersTotal int    `json:"workers_total"`
		} `json:"languages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	py, ok := h.Languages["python"]
	if h.Status != "ok" || len(h.Languages) != 1 || !ok || py.Status != "ok" || py.WorkersTotal != 1 || py.WorkersReady != 1 {
		t.Errorf("/healthz %+v, want python's pool of one worker, ok", h)
	}
	m := srv.metrics(t)
	for series, want := range map[string]float64{
		`pyrun_language_calls_total{language="python",status="success"}`: 1,
		`pyrun_language_workers_configured{language="python"}`:           1,
		`pyrun_language_sessions{language="python"}`:                     0,
		`pyrun_calls_total{status="success"}`:                            1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
}

// TestWarmupLanguageSteps: warmup's steps for a language other than the
// first (Python's are TestWarmup's) find its runtime's files, start a
// worker of it, and run its self-test calls: a print and a value, a host
// file out of reach, a runaway loop stopped at its limit.
func TestWarmupLanguageSteps(t *testing.T) {
	needBinary(t)
	o, _, err := loadOptions("warmup", nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := supervisor.Provision(t.Context(), o.runtimeDir, os.Stderr, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l     lang.Language
		steps []string
		runs  string
	}{
		{lang.JavaScript, []string{"typescript", "worker", "self-test", "sandbox", "interrupt"}, "typescript 6.0.3"},
		{lang.R, []string{"webr", "worker", "self-test", "sandbox", "interrupt"}, "webr "},
	} {
		var daemons []*daemon
		steps := languageSteps(o, tc.l, tc.l.ID+" ", &rt, &daemons, hclog.NewNullLogger())
		var names []string
		for i, step := range steps {
			names = append(names, step.name)
			detail, err := step.run(t.Context())
			if err != nil {
				t.Errorf("%s: %v", step.name, err)
				break
			}
			if i == 0 && !strings.Contains(detail, tc.runs) {
				t.Errorf("%s: %q, want the versions (%s)", step.name, detail, tc.runs)
			}
		}
		for _, d := range daemons {
			d.Close()
		}
		for i := range tc.steps {
			tc.steps[i] = tc.l.ID + " " + tc.steps[i]
		}
		if !slices.Equal(names, tc.steps) {
			t.Errorf("%s's steps: %q, want %q", tc.l.ID, names, tc.steps)
		}
	}
}

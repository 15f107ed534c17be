package main

// End-to-end tests: the pyrun binary, built once by TestMain, driven by the
// go-sdk's MCP client over stdio exactly as an agent would drive it, plus the
// `run` and `version` commands as a shell would. They assert what docs/contract.md
// promises (the XML text block, structuredContent, isError, exit codes,
// isolation between calls, limits), not how pyrun does it.
//
// Most cases share one two-worker server, because every worker costs seconds
// of CPU to start; cases that need their own configuration start their own.
// The top-level tests run one after another, in file order, so that the
// timing case measures pyrun and not its neighbours. With -short, they skip.
//
// The runtime (Deno and Pyodide) comes from the default runtime folder and is
// installed there on first use.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/logwatch"
	"github.com/pyrun/pyrun/internal/testtier"
	"github.com/pyrun/pyrun/lang"
)

// pyrunBin is the binary under test; empty with -short.
var pyrunBin string

// callTimeout bounds any one tool call; calls in these tests take at most a
// few seconds, and a hang should fail rather than stall the run.
const callTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	if spec := os.Getenv(envConfine); spec != "" {
		os.Exit(confineAndExec(spec))
	}
	flag.Parse()
	// pyrun stdio attaches to a service on $XDG_RUNTIME_DIR/pyrun.sock (or
	// /run/user/UID/pyrun.sock) when one answers: the tests' own servers
	// must not attach to the user's. An empty runtime folder of their own
	// has no service.
	runtimeDir, err := os.MkdirTemp("", "pyrun-e2e-run-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	os.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	// Python sessions keep checkpoints in $XDG_STATE_HOME/pyrun/sessions by
	// default (docs/sessions.md), and keep them when pyrun stops: the
	// tests' go to a folder of their own, removed with it.
	os.Setenv("XDG_STATE_HOME", filepath.Join(runtimeDir, "state"))
	if testing.Short() {
		code := m.Run()
		os.RemoveAll(runtimeDir)
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "pyrun-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	pyrunBin = filepath.Join(dir, "pyrun")
	build := exec.Command("go", "build", "-o", pyrunBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build pyrun: %v\n", err)
		os.RemoveAll(dir)
		os.RemoveAll(runtimeDir)
		os.Exit(2)
	}
	code := m.Run()
	if err := shared.close(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the shared pyrun stdio server did not exit cleanly: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.RemoveAll(runtimeDir)
	os.Exit(code)
}

// needBinary skips t under -short, where TestMain builds no binary: the
// binary runs the worker runtime.
func needBinary(t *testing.T) {
	t.Helper()
	testtier.Runtime(t)
}

// ---- servers ---------------------------------------------------------------

// server is a `pyrun stdio` child with a connected client session.
type server struct {
	session *sdk.ClientSession
	log     *logWatcher
	cmd     *exec.Cmd // the pyrun process (nil: not one the test started)
}

// startServer starts `pyrun stdio` with args and connects to it. Its stderr
// (JSON logs at debug level) goes to a logWatcher.
func startServer(ctx context.Context, args ...string) (*server, error) {
	return startServerWith(ctx, nil, args...)
}

// startServerWith is startServer with a client made with copts.
func startServerWith(ctx context.Context, copts *sdk.ClientOptions, args ...string) (*server, error) {
	return startServerAt(ctx, "", copts, args...)
}

// startServerAt is startServerWith with the client asking for MCP revision
// (the go-sdk's latest, 2026-07-28, when empty).
func startServerAt(ctx context.Context, revision string, copts *sdk.ClientOptions, args ...string) (*server, error) {
	return startServerFor(ctx, 0, revision, copts, args...)
}

// startServerFor is startServerAt with pyrun given up to exit (0: the
// SDK's 5s) after its client hung up, before it is sent SIGTERM.
func startServerFor(ctx context.Context, exit time.Duration, revision string, copts *sdk.ClientOptions, args ...string) (*server, error) {
	lw := newLogWatcher()
	argv := append([]string{"stdio", "--log-format", "json", "--log-level", "debug"}, args...)
	cmd := exec.Command(pyrunBin, argv...)
	cmd.Stderr = lw
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-e2e", Version: "test"}, copts)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: exit}, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		return nil, fmt.Errorf("connect to pyrun %s: %w\n%s", strings.Join(argv, " "), err, lw.tail())
	}
	return &server{session: cs, log: lw, cmd: cmd}, nil
}

// newServer starts a server of the test's own; it stops with the test and
// must exit cleanly.
func newServer(t *testing.T, args ...string) *server {
	t.Helper()
	needBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)
	return s
}

// closeWithTest stops s when t ends: pyrun stdio must exit cleanly once
// its client hangs up, and a failed test shows pyrun's last lines of log.
func (s *server) closeWithTest(t *testing.T) {
	t.Cleanup(func() {
		if err := s.session.Close(); err != nil {
			t.Errorf("pyrun stdio did not exit cleanly after the client hung up: %v", err)
		}
		if t.Failed() {
			t.Logf("pyrun's stderr (last lines):\n%s", s.log.tail())
		}
	})
}

// shared is the two-worker server most tests use. It starts on first use and
// stops in TestMain.
var shared sharedServer

type sharedServer struct {
	once sync.Once
	srv  *server
	err  error
}

func (s *sharedServer) get(t *testing.T) *server {
	t.Helper()
	needBinary(t)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		s.srv, s.err = startServer(ctx, "--workers", "2")
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	srv := s.srv
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shared pyrun's stderr (last lines):\n%s", srv.log.tail())
		}
	})
	return srv
}

func (s *sharedServer) close() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.session.Close()
}

// logWatcher takes pyrun's stderr (JSON log lines), keeps the last lines for
// failure messages and counts lines by message (worker starts and
// retirements, cancelled calls), so that a test can wait for the pool to be
// whole, or for a call to be cancelled, without sleeping.
type logWatcher struct {
	*logwatch.Watcher
	counts map[string]int // lines by @message, under the Watcher's lock
}

func newLogWatcher() *logWatcher {
	w := &logWatcher{counts: map[string]int{}}
	w.Watcher = logwatch.New(60, func(line string) bool {
		var rec struct {
			Message string `json:"@message"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			return false
		}
		w.counts[rec.Message]++
		return true
	})
	return w
}

// tail is the last lines pyrun logged.
func (w *logWatcher) tail() string { return w.Tail(0) }

// count is how many lines with message pyrun has logged so far.
func (w *logWatcher) count(message string) (n int) {
	w.Locked(func() { n = w.counts[message] })
	return n
}

// waitFor waits until cond, given the counts of lines by message, holds.
func (w *logWatcher) waitFor(ctx context.Context, what string, cond func(counts map[string]int) bool) error {
	if err := w.Wait(ctx, func() bool { return cond(w.counts) }); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// waitWorkers waits until at least n workers are ready and not retired.
func (w *logWatcher) waitWorkers(ctx context.Context, n int) error {
	return w.waitFor(ctx, fmt.Sprintf("%d ready workers", n), func(c map[string]int) bool {
		return c["worker ready"]-c["retiring worker"] >= n
	})
}

// ---- calls -----------------------------------------------------------------

// structured mirrors structuredContent (docs/contract.md section 2).
type structured struct {
	Status       string          `json:"status"`
	Stdout       string          `json:"stdout"`
	Stderr       string          `json:"stderr"`
	Output       []chunk         `json:"output"`
	ReturnValue  json.RawMessage `json:"return_value"`
	Error        *string         `json:"error"`
	Dependencies []string        `json:"dependencies"`
	ExitCode     int             `json:"exit_code"`
	DurationMS   float64         `json:"duration_ms"`
	SessionID    string          `json:"session_id"`
	Checkpoint   *struct {
		AfterCall int    `json:"after_call"`
		Taken     string `json:"taken"`
	} `json:"checkpoint"`
	Displays []displayInfo `json:"displays"`
	Files    []fileInfo    `json:"files"`
}

type displayInfo struct {
	MIMEType string `json:"mime_type"`
	URI      string `json:"uri"`
	Bytes    int    `json:"bytes"`
}

type fileInfo struct {
	Path     string `json:"path"`
	URI      string `json:"uri"`
	MIMEType string `json:"mime_type"`
	Bytes    int    `json:"bytes"`
}

type chunk struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// result is a checked tool result: its text block, split into sections, and
// its structured content.
type result struct {
	isError  bool
	text     string
	sections map[string]string
	sc       structured
	// rest are the content blocks after the text block (rich results).
	rest []sdk.Content
}

var structuredKeys = []string{
	"status", "stdout", "stderr", "output", "return_value", "error",
	"dependencies", "exit_code", "duration_ms",
}

var exitCodes = map[string]int{
	"success": 0, "run-error": 1, "install-error": 1,
	"timeout": 124, "memory-error": 137, "crashed": 137,
}

// callRaw calls run_python_code with args. Safe from any goroutine.
func (s *server) callRaw(ctx context.Context, args map[string]any) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return s.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: args})
}

// call calls run_python_code and checks the invariants every result of a
// call that ran must hold. Safe from any goroutine.
func (s *server) call(ctx context.Context, args map[string]any) (result, error) {
	res, err := s.callRaw(ctx, args)
	if err != nil {
		return result{}, err
	}
	return checkResult(res)
}

func (s *server) mustCall(t *testing.T, args map[string]any) result {
	t.Helper()
	r, err := s.call(t.Context(), args)
	if err != nil {
		t.Fatalf("call %v: %v", args, err)
	}
	return r
}

func (s *server) run(t *testing.T, code string) result {
	t.Helper()
	return s.mustCall(t, map[string]any{"python_code": code})
}

func checkResult(res *sdk.CallToolResult) (result, error) {
	var r result
	if len(res.Content) == 0 {
		return r, errors.New("no content blocks")
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		return r, fmt.Errorf("the first content block is %T, want text", res.Content[0])
	}
	r.text, r.isError, r.rest = tc.Text, res.IsError, res.Content[1:]
	if res.StructuredContent == nil {
		return r, fmt.Errorf("no structuredContent; text: %s", r.text)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return r, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return r, fmt.Errorf("structuredContent is not an object: %s", raw)
	}
	for _, k := range structuredKeys {
		if _, ok := keys[k]; !ok {
			return r, fmt.Errorf("structuredContent lacks %q: %s", k, raw)
		}
	}
	if err := json.Unmarshal(raw, &r.sc); err != nil {
		return r, fmt.Errorf("structuredContent %s: %w", raw, err)
	}
	sc := &r.sc
	if r.sections, err = parseBlock(r.text); err != nil {
		return r, fmt.Errorf("text block does not parse: %v\n%s", err, r.text)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if r.sections["session_id"] != sc.SessionID {
		bad("text says session_id %q, structuredContent %q", r.sections["session_id"], sc.SessionID)
	}
	if r.sections["status"] != sc.Status {
		bad("text says status %q, structuredContent %q", r.sections["status"], sc.Status)
	}
	want, known := exitCodes[sc.Status]
	if !known {
		bad("unknown status %q", sc.Status)
	}
	if sc.ExitCode != want {
		bad("status %s with exit_code %d, want %d", sc.Status, sc.ExitCode, want)
	}
	if r.isError != (sc.Status != "success") {
		bad("isError %v with status %s", r.isError, sc.Status)
	}
	if sc.DurationMS < 0 {
		bad("negative duration_ms %v", sc.DurationMS)
	}
	// The ordered output and the two streams tell one story.
	var all, out, errs strings.Builder
	for _, c := range sc.Output {
		all.WriteString(c.Text)
		switch c.Stream {
		case "stdout":
			out.WriteString(c.Text)
		case "stderr":
			errs.WriteString(c.Text)
		default:
			bad("output chunk on stream %q", c.Stream)
		}
	}
	if out.String() != sc.Stdout || errs.String() != sc.Stderr {
		bad("output chunks do not add up to stdout %q and stderr %q: %v", sc.Stdout, sc.Stderr, sc.Output)
	}
	wantOutput := strings.TrimSuffix(all.String(), "\n")
	gotOutput, hasOutput := r.sections["output"]
	switch {
	case wantOutput == "" && hasOutput:
		bad("an <output> section without output")
	case wantOutput != "" && !strings.Contains(wantOutput, "<") && gotOutput != wantOutput:
		bad("<output> is %q, the output chunks say %q", gotOutput, wantOutput)
	}
	if sc.Status == "success" {
		if sc.Error != nil {
			bad("success with error %q", *sc.Error)
		}
		if _, ok := r.sections["error"]; ok {
			bad("success with an <error> section")
		}
		text, has := r.sections["return_value"]
		isNull := len(sc.ReturnValue) == 0 || string(sc.ReturnValue) == "null"
		switch {
		case has && !jsonEqual(text, string(sc.ReturnValue)):
			bad("<return_value> %s differs from return_value %s", text, sc.ReturnValue)
		case !has && !isNull:
			bad("return_value %s without a <return_value> section", sc.ReturnValue)
		}
	} else {
		if sc.Error == nil || *sc.Error == "" {
			bad("status %s without an error", sc.Status)
		} else if e := r.sections["error"]; !strings.Contains(*sc.Error, "<") && e != *sc.Error {
			bad("<error> %q differs from error %q", e, *sc.Error)
		}
		if _, ok := r.sections["return_value"]; ok {
			bad("status %s with a <return_value> section", sc.Status)
		}
	}
	// The text block lists every display and file the result carries.
	if n := len(sc.Displays); n != len(itemLines(r.sections["displays"])) {
		bad("%d displays, but <displays> is %q", n, r.sections["displays"])
	}
	if n := len(sc.Files); n != len(itemLines(r.sections["files"])) {
		bad("%d files, but <files> is %q", n, r.sections["files"])
	}
	if len(sc.Displays)+len(sc.Files) == 0 && len(r.rest) > 0 {
		bad("%d content blocks after the text without displays or files", len(r.rest))
	}
	if len(problems) > 0 {
		return r, fmt.Errorf("inconsistent result:\n  %s\ntext:\n%s", strings.Join(problems, "\n  "), r.text)
	}
	return r, nil
}

// sectionOrder is the order of the text block's sections; return_value and
// error share a place, as only one of them appears.
var sectionOrder = map[string]int{"status": 0, "session_id": 1, "dependencies": 2, "output": 3, "displays": 4, "files": 5, "return_value": 6, "error": 6}

// itemLines are the lines of a <displays> or <files> section that name an
// item, without pyrun's notes.
func itemLines(section string) []string {
	var items []string
	for _, l := range strings.Split(section, "\n") {
		if l != "" && !strings.HasPrefix(l, "[pyrun:") {
			items = append(items, l)
		}
	}
	return items
}

// parseBlock splits mcp-run-python's text block into its sections. It fails
// on anything outside a section, an unknown or repeated section, or sections
// out of order, so a passing parse means the block is well formed.
func parseBlock(text string) (map[string]string, error) {
	secs := map[string]string{}
	last := -1
	rest := text
	for rest != "" {
		if !strings.HasPrefix(rest, "<") {
			return nil, fmt.Errorf("text outside a section: %q", clipText(rest))
		}
		end := strings.IndexByte(rest, '>')
		if end < 0 {
			return nil, fmt.Errorf("unterminated tag: %q", clipText(rest))
		}
		tag := rest[1:end]
		pos, known := sectionOrder[tag]
		if !known {
			return nil, fmt.Errorf("unknown section <%s>", tag)
		}
		if pos <= last {
			return nil, fmt.Errorf("section <%s> repeated or out of order", tag)
		}
		last = pos
		body := rest[end+1:]
		closing := "</" + tag + ">"
		i := strings.Index(body, closing)
		if i < 0 {
			return nil, fmt.Errorf("section <%s> is not closed", tag)
		}
		rest = strings.TrimPrefix(body[i+len(closing):], "\n")
		body = body[:i]
		if tag != "status" && tag != "dependencies" && tag != "session_id" {
			if !strings.HasPrefix(body, "\n") || !strings.HasSuffix(body, "\n") {
				return nil, fmt.Errorf("section <%s> does not hold its text on lines of its own", tag)
			}
			body = body[1 : len(body)-1]
		}
		secs[tag] = body
	}
	if _, ok := secs["status"]; !ok {
		return nil, errors.New("no <status>")
	}
	return secs, nil
}

func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// wantStatus fails the test unless r has status.
func wantStatus(t *testing.T, r result, status string) {
	t.Helper()
	if r.sc.Status != status {
		t.Fatalf("status %q, want %q; text:\n%s", r.sc.Status, status, r.text)
	}
}

// wantValue fails the test unless r succeeded with the return value want (JSON).
func wantValue(t *testing.T, r result, want string) {
	t.Helper()
	wantStatus(t, r, "success")
	if !jsonEqual(string(r.sc.ReturnValue), want) {
		t.Fatalf("return_value %s, want %s; text:\n%s", r.sc.ReturnValue, want, r.text)
	}
	if !jsonEqual(r.sections["return_value"], want) {
		t.Fatalf("<return_value> %q, want %s", r.sections["return_value"], want)
	}
}

// mergeChunks joins consecutive chunks of one stream: how writes are split
// into chunks is not part of the contract, their order is.
func mergeChunks(cs []chunk) []chunk {
	var out []chunk
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].Stream == c.Stream {
			out[n-1].Text += c.Text
			continue
		}
		out = append(out, c)
	}
	return out
}

// ---- the tool, on the shared server ----------------------------------------

func TestToolDescription(t *testing.T) {
	s := shared.get(t)
	tools, err := s.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tool *sdk.Tool
	for _, tl := range tools.Tools {
		if tl.Name == "run_python_code" {
			tool = tl
		}
	}
	if tool == nil {
		t.Fatalf("no run_python_code tool among %d tools", len(tools.Tools))
	}
	m := regexp.MustCompile(`Python (3\.\d+\.\d+)`).FindStringSubmatch(tool.Description)
	if m == nil {
		t.Fatalf("the description does not give the exact Python version:\n%s", tool.Description)
	}
	r := s.run(t, "import sys\nsys.version.split()[0]")
	wantValue(t, r, fmt.Sprintf("%q", m[1]))
	for _, word := range []string{"await", "stdout", "stderr"} {
		if !strings.Contains(tool.Description, word) {
			t.Errorf("the description does not mention %q:\n%s", word, tool.Description)
		}
	}
}

func TestPrint(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, `print("hello, world")`)
	wantStatus(t, r, "success")
	if r.sc.Stdout != "hello, world\n" || r.sc.Stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q and nothing", r.sc.Stdout, r.sc.Stderr, "hello, world\n")
	}
	if want := "<status>success</status>\n<output>\nhello, world\n</output>"; r.text != want {
		t.Errorf("text:\n%s\nwant:\n%s", r.text, want)
	}
	if string(r.sc.ReturnValue) != "null" || r.sc.Error != nil || len(r.sc.Dependencies) != 0 {
		t.Errorf("return_value %s, error %v, dependencies %v; want null, null, []", r.sc.ReturnValue, r.sc.Error, r.sc.Dependencies)
	}
}

func TestReturnValue(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct {
		name, code string
		want       string // JSON; "" for no return value
	}{
		{"int", "1 + 2", "3"},
		{"str", `"py" + "run"`, `"pyrun"`},
		{"dict", `{"a": [1, 2.5], "b": None, "c": True}`, `{"a": [1, 2.5], "b": null, "c": true}`},
		{"tuple", "(1, 'x')", `[1, "x"]`},
		{"set", "{3, 1, 2}", "[1, 2, 3]"},
		{"after statements", "x = 20\ny = x + 1\ny * 2", "42"},
		{"None", "None", ""},
		{"assignment", "x = 5", ""},
		{"print", `print("shown")`, ""},
		// The documented conversions of values JSON has no type for.
		{"bytes", `[b"utf-8 text", b"\xff\x00"]`, `["utf-8 text", {"$bytes_base64": "/wA="}]`},
		{"frozenset of mixed types", `sorted(frozenset({1, 2})) + [frozenset({"a"})]`, `[1, 2, ["a"]]`},
		{"dataclass", "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\n    tags: tuple\nP(1, ('a',))", `{"x": 1, "tags": ["a"]}`},
		{"pydantic-like model_dump", "class M:\n    def model_dump(self, mode):\n        return {'mode': mode}\nM()", `{"mode": "json"}`},
		{"numpy-like tolist", "class A:\n    __module__ = 'numpy'\n    def tolist(self):\n        return [[1, 2], [3, 4]]\nA()", `[[1, 2], [3, 4]]`},
		{"dates, decimals, complex, NaN", "import datetime, decimal, math\n[datetime.date(2025, 3, 18), decimal.Decimal('1.10'), 1+2j, math.nan, -math.inf]", `["2025-03-18", "1.10", "(1+2j)", "NaN", "-Infinity"]`},
		{"non-string keys and cycles", "d = {1: 'a', None: 'b'}\nl = [d]\nl.append(l)\nl", `[{"1": "a", "null": "b"}, "<cycle>"]`},
		{"anything else by repr", "class O:\n    def __repr__(self):\n        return '<O>'\nO()", `"<O>"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(t, tc.code)
			if tc.want != "" {
				wantValue(t, r, tc.want)
				return
			}
			wantStatus(t, r, "success")
			if string(r.sc.ReturnValue) != "null" {
				t.Errorf("return_value %s, want null", r.sc.ReturnValue)
			}
			if _, ok := r.sections["return_value"]; ok {
				t.Errorf("a <return_value> section for None:\n%s", r.text)
			}
		})
	}
}

func TestErrorTraceback(t *testing.T) {
	s := shared.get(t)
	code := "def divide(a, b):\n    return a / b\n\nprint(\"before\")\ndivide(1, 0)\n"
	r := s.run(t, code)
	wantStatus(t, r, "run-error")
	if r.sc.ExitCode != 1 || !r.isError {
		t.Errorf("exit_code %d, isError %v; want 1, true", r.sc.ExitCode, r.isError)
	}
	if r.sc.Stdout != "before\n" {
		t.Errorf("stdout %q, want the output before the error", r.sc.Stdout)
	}
	tb := *r.sc.Error
	for _, want := range []string{
		"Traceback (most recent call last):",
		`File "main.py", line 5`,
		`File "main.py", line 2, in divide`,
		"ZeroDivisionError: division by zero",
	} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	for _, internal := range []string{"_pyodide", "pyrun_helper", "pyodide/"} {
		if strings.Contains(tb, internal) {
			t.Errorf("traceback shows pyrun's machinery (%q):\n%s", internal, tb)
		}
	}
	if !strings.HasSuffix(tb, "ZeroDivisionError: division by zero") {
		t.Errorf("traceback does not end with the exception:\n%s", tb)
	}

	t.Run("syntax error", func(t *testing.T) {
		r := s.run(t, "x = 1\nif x\n    pass\n")
		wantStatus(t, r, "run-error")
		if e := *r.sc.Error; !strings.Contains(e, "SyntaxError") || !strings.Contains(e, `File "main.py", line 2`) ||
			strings.Contains(e, "pyrun_helper") || strings.Contains(e, "_pyodide") {
			t.Errorf("error:\n%s\nwant a SyntaxError at main.py line 2 without pyrun's frames", e)
		}
	})
}

func TestAsync(t *testing.T) {
	s := shared.get(t)
	code := `import asyncio

async def twice(x):
    await asyncio.sleep(0.05)
    return 2 * x

print("start")
await asyncio.sleep(0.1)
results = await asyncio.gather(twice(1), twice(2))
print("end")
results
`
	r := s.run(t, code)
	wantValue(t, r, "[2, 4]")
	if r.sc.Stdout != "start\nend\n" {
		t.Errorf("stdout %q, want %q", r.sc.Stdout, "start\nend\n")
	}
	if r.sc.DurationMS < 100 {
		t.Errorf("duration_ms %v: the awaits did not wait", r.sc.DurationMS)
	}
}

func TestGlobalVariables(t *testing.T) {
	s := shared.get(t)
	r := s.mustCall(t, map[string]any{
		"python_code": "[type(d).__name__, d['k'], d['nested']['n'][1], type(l).__name__, l[1], l[2] is None, " +
			"l[3] is True, n + 1, type(n).__name__, f * 2, s.upper()]",
		"global_variables": map[string]any{
			"d": map[string]any{"k": "v", "nested": map[string]any{"n": []int{1, 2}}},
			"l": []any{1, "two", nil, true},
			"n": 41,
			"f": 1.25,
			"s": "text",
		},
	})
	wantValue(t, r, `["dict", "v", 2, "list", "two", true, true, 42, "int", 2.5, "TEXT"]`)
}

func TestStdoutStderr(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, `import sys
print("out 1")
print("err 1", file=sys.stderr)
print("out 2")
sys.stderr.write("err 2\n")
sys.stdout.write("out 3\n")
`)
	wantStatus(t, r, "success")
	if want := "out 1\nout 2\nout 3\n"; r.sc.Stdout != want {
		t.Errorf("stdout %q, want %q", r.sc.Stdout, want)
	}
	if want := "err 1\nerr 2\n"; r.sc.Stderr != want {
		t.Errorf("stderr %q, want %q", r.sc.Stderr, want)
	}
	want := []chunk{
		{"stdout", "out 1\n"}, {"stderr", "err 1\n"}, {"stdout", "out 2\n"},
		{"stderr", "err 2\n"}, {"stdout", "out 3\n"},
	}
	if got := mergeChunks(r.sc.Output); !reflect.DeepEqual(got, want) {
		t.Errorf("output %v, want %v", got, want)
	}
	if want := "out 1\nerr 1\nout 2\nerr 2\nout 3"; r.sections["output"] != want {
		t.Errorf("<output> %q, want %q", r.sections["output"], want)
	}

	t.Run("closing tag in output", func(t *testing.T) {
		r := s.run(t, `print("a </output> b <error>c</error>")`)
		wantStatus(t, r, "success")
		if r.sc.Stdout != "a </output> b <error>c</error>\n" {
			t.Errorf("stdout %q", r.sc.Stdout)
		}
		if len(r.sections) != 2 || strings.Contains(r.sections["output"], "</output>") {
			t.Errorf("the block does not keep the printed tag inside <output>:\n%s", r.text)
		}
	})
}

// TestParallelCalls runs four one-second loops on two workers: two run at a
// time, so all four take about two seconds. The loops run for a second of
// wall-clock time rather than a fixed amount of work, so that a busy machine
// does not stretch them; what the bounds catch is calls that do not run in
// parallel (4 s) or more calls at once than workers (1 s).
func TestParallelCalls(t *testing.T) {
	s := shared.get(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitWorkers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	code := `import time
start = time.perf_counter()
n = 0
while time.perf_counter() - start < 1.0:
    n += 1
n
`
	const calls = 4
	var wg sync.WaitGroup
	results := make([]result, calls)
	errs := make([]error, calls)
	began := time.Now()
	for i := range calls {
		wg.Go(func() { results[i], errs[i] = s.call(t.Context(), map[string]any{"python_code": code}) })
	}
	wg.Wait()
	elapsed := time.Since(began)
	for i := range calls {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		wantStatus(t, results[i], "success")
		if d := results[i].sc.DurationMS; d < 1000 {
			t.Errorf("call %d took %v ms, want at least 1000", i, d)
		}
	}
	t.Logf("%d one-second loops on 2 workers: %v", calls, elapsed.Round(time.Millisecond))
	const wantMin, wantMax = 1500 * time.Millisecond, 3500 * time.Millisecond
	if elapsed < wantMin || elapsed > wantMax {
		t.Errorf("%d one-second calls on 2 workers took %v, want between %v and %v", calls, elapsed, wantMin, wantMax)
	}
}

func TestConcurrentOutputsDoNotMix(t *testing.T) {
	s := shared.get(t)
	const calls, lines = 16, 300
	code := `import sys
for i in range(%d):
    print(TOKEN, i, file=sys.stderr if i %% 3 == 0 else sys.stdout)
    if i %% 50 == 0:
        await __import__("asyncio").sleep(0)
TOKEN
`
	var wg sync.WaitGroup
	results := make([]result, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			results[i], errs[i] = s.call(t.Context(), map[string]any{
				"python_code":      fmt.Sprintf(code, lines),
				"global_variables": map[string]any{"TOKEN": fmt.Sprintf("token-%02d", i)},
			})
		})
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil {
			t.Errorf("call %d: %v", i, errs[i])
			continue
		}
		r := results[i]
		token := fmt.Sprintf("token-%02d", i)
		if r.sc.Status != "success" || !jsonEqual(string(r.sc.ReturnValue), fmt.Sprintf("%q", token)) {
			t.Errorf("call %d: status %s, return_value %s; want success, %q", i, r.sc.Status, r.sc.ReturnValue, token)
			continue
		}
		n := 0
		for _, stream := range []string{r.sc.Stdout, r.sc.Stderr} {
			for line := range strings.Lines(stream) {
				n++
				if !strings.HasPrefix(line, token+" ") {
					t.Errorf("call %d (%s) has a foreign line %q", i, token, line)
					break
				}
			}
		}
		if n != lines {
			t.Errorf("call %d has %d lines of output, want %d", i, n, lines)
		}
	}
}

func TestBadArguments(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct {
		name string
		args map[string]any
		want string // the argument the error must name
	}{
		{"missing python_code", map[string]any{}, "python_code"},
		{"python_code not a string", map[string]any{"python_code": 123}, "python_code"},
		{"unknown argument", map[string]any{"python_code": "1", "bogus_arg": 1}, "bogus_arg"},
		{"global_variables a list", map[string]any{"python_code": "1", "global_variables": []int{1, 2}}, "global_variables"},
		{"global_variables a string", map[string]any{"python_code": "1", "global_variables": "x=1"}, "global_variables"},
		{"timeout_seconds a string", map[string]any{"python_code": "1", "timeout_seconds": "soon"}, "timeout_seconds"},
		{"timeout_seconds negative", map[string]any{"python_code": "1", "timeout_seconds": -1}, "timeout_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.callRaw(t.Context(), tc.args)
			if err != nil {
				t.Fatalf("a protocol error, want a tool error: %v", err)
			}
			if !res.IsError {
				t.Fatalf("isError false for %v", tc.args)
			}
			var text strings.Builder
			for _, c := range res.Content {
				if txt, ok := c.(*sdk.TextContent); ok {
					text.WriteString(txt.Text)
				}
			}
			t.Logf("%v: %s", tc.args, text.String())
			if !strings.Contains(text.String(), tc.want) {
				t.Errorf("the error does not name %q: %q", tc.want, text.String())
			}
		})
	}
	// The server is still fine.
	wantValue(t, s.run(t, "1"), "1")
}

func TestTimeout(t *testing.T) {
	s := shared.get(t)
	for _, tc := range []struct{ name, code string }{
		{"busy loop", "print('before the loop')\nwhile True:\n    pass\n"},
		{"time.sleep", "import time\nprint('before the loop')\ntime.sleep(100)\n"},
		{"asyncio.sleep", "import asyncio\nprint('before the loop')\nawait asyncio.sleep(100)\n"},
		// Python ignores the interrupt: the worker is killed and replaced.
		{"interrupt ignored", "import time\nprint('before the loop')\nwhile True:\n    try:\n        time.sleep(100)\n" +
			"    except KeyboardInterrupt:\n        pass\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			r := s.mustCall(t, map[string]any{"python_code": tc.code, "timeout_seconds": 1})
			elapsed := time.Since(began)
			wantStatus(t, r, "timeout")
			if r.sc.ExitCode != 124 || !r.isError {
				t.Errorf("exit_code %d, isError %v; want 124, true", r.sc.ExitCode, r.isError)
			}
			if r.sc.Stdout != "before the loop\n" {
				t.Errorf("stdout %q, want the output before the loop", r.sc.Stdout)
			}
			if r.sections["output"] != "before the loop" {
				t.Errorf("<output> %q, want the output before the loop", r.sections["output"])
			}
			if elapsed < time.Second || elapsed > 15*time.Second {
				t.Errorf("a call with timeout_seconds=1 took %v", elapsed)
			}
			if strings.Contains(*r.sc.Error, "pyrun_helper") || strings.Contains(*r.sc.Error, "_pyodide") {
				t.Errorf("the error shows pyrun's machinery:\n%s", *r.sc.Error)
			}
			// The next calls work, whichever worker they land on.
			for range 2 {
				r := s.run(t, "print('after')\n6 * 7")
				wantValue(t, r, "42")
				if r.sc.Stdout != "after\n" {
					t.Errorf("the call after a timeout printed %q, want %q", r.sc.Stdout, "after\n")
				}
			}
		})
	}
}

// TestWorkerCrash kills a worker from inside; it runs last on the shared
// server, as the replacement worker costs a start.
func TestWorkerCrash(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, "import js\nprint('goodbye')\njs.Deno.exit(7)\n")
	wantStatus(t, r, "crashed")
	if r.sc.ExitCode != 137 || !r.isError {
		t.Errorf("exit_code %d, isError %v; want 137, true", r.sc.ExitCode, r.isError)
	}
	if r.sc.Stdout != "goodbye\n" {
		t.Errorf("stdout %q, want the output before the crash", r.sc.Stdout)
	}
	// Calls keep working: four at once, so both workers (one of them new
	// or starting) take some.
	var wg sync.WaitGroup
	results := make([]result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = s.call(t.Context(), map[string]any{"python_code": fmt.Sprintf("print(%d)\n%d", i, i)})
		})
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("call %d after the crash: %v", i, errs[i])
		}
		wantValue(t, results[i], fmt.Sprint(i))
	}
	// The crashed worker is replaced.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitWorkers(ctx, 2); err != nil {
		t.Errorf("the crashed worker was not replaced: %v", err)
	}
}

// TestWorkerStderrIsRelogged: what a worker process writes to its own
// stderr (not the call's sys.stderr) reaches pyrun's log, under the
// worker's name, and not the call's output.
func TestWorkerStderrIsRelogged(t *testing.T) {
	s := shared.get(t)
	marker := fmt.Sprintf("relog-marker-%d", time.Now().UnixNano())
	r := s.run(t, "import js\njs.console.error('"+marker+"')")
	wantStatus(t, r, "success")
	if strings.Contains(r.text, marker) {
		t.Errorf("the worker's own stderr reached the call's output:\n%s", r.text)
	}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the marker in pyrun's log", func(c map[string]int) bool { return c[marker] > 0 }); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s.log.tail(), "\n") {
		var rec struct {
			Message string `json:"@message"`
			Module  string `json:"@module"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == marker {
			if !regexp.MustCompile(`^pyrun\.pool\.worker-\d+$`).MatchString(rec.Module) {
				t.Errorf("logged under %q, want the worker's name (pyrun.pool.worker-N)", rec.Module)
			}
			return
		}
	}
	t.Errorf("the marker's log line is not among the last lines:\n%s", s.log.tail())
}

// ---- isolation, on a one-worker server -------------------------------------

// TestNoLeak checks that nothing a call leaves behind reaches the next call.
// The server has one worker, so every call lands where the previous ran.
func TestNoLeak(t *testing.T) {
	s := newServer(t, "--workers", "1")

	t.Run("globals and imports", func(t *testing.T) {
		wantStatus(t, s.mustCall(t, map[string]any{
			"python_code":      "leaked_var = 42\nimport json\nimport builtins\nbuiltins.leaked_builtin = 1\ndef leaked_fn(): pass",
			"global_variables": map[string]any{"leaked_global": 1},
		}), "success")
		for _, name := range []string{"leaked_var", "json", "leaked_builtin", "leaked_fn", "leaked_global"} {
			r := s.run(t, name)
			wantStatus(t, r, "run-error")
			if want := fmt.Sprintf("NameError: name '%s' is not defined", name); !strings.Contains(*r.sc.Error, want) {
				t.Errorf("%s in the next call: %s; want %s", name, *r.sc.Error, want)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		before := s.run(t, "import os\nos.getcwd()")
		wantStatus(t, before, "success")
		wantStatus(t, s.run(t, `import os
open("leak.txt", "w").write("x")
os.makedirs("leakdir/sub")
open("leakdir/sub/f.txt", "w").write("x")
open("/tmp/leak.txt", "w").write("x")
os.makedirs("/tmp/leakdir")
os.chdir("/tmp")
`), "success")
		r := s.run(t, `import os
[os.getcwd(), os.listdir("."), os.path.exists("/tmp/leak.txt"), os.path.exists("/tmp/leakdir")]`)
		wantValue(t, r, fmt.Sprintf(`[%s, [], false, false]`, before.sc.ReturnValue))
	})

	t.Run("modules", func(t *testing.T) {
		wantValue(t, s.run(t, `open("mymod.py", "w").write("VALUE = 1\n")
import mymod
mymod.VALUE`), "1")
		r := s.run(t, "import mymod")
		wantStatus(t, r, "run-error")
		if !strings.Contains(*r.sc.Error, "ModuleNotFoundError") {
			t.Errorf("import mymod in the next call: %s; want ModuleNotFoundError", *r.sc.Error)
		}
		// A module of the same name written again is the new one.
		wantValue(t, s.run(t, `open("mymod.py", "w").write("VALUE = 2\n")
import mymod
mymod.VALUE`), "2")
	})

	t.Run("asyncio task", func(t *testing.T) {
		r := s.run(t, `import asyncio
async def leak():
    while True:
        print("LEAK")
        await asyncio.sleep(0.05)
asyncio.get_event_loop().create_task(leak())
await asyncio.sleep(0.12)
`)
		wantStatus(t, r, "success")
		if !strings.Contains(r.sc.Stdout, "LEAK") {
			t.Fatalf("the task did not run during its own call: stdout %q", r.sc.Stdout)
		}
		for range 3 {
			r := s.run(t, "import asyncio\nawait asyncio.sleep(0.3)\nprint('clean')")
			wantStatus(t, r, "success")
			if r.sc.Stdout != "clean\n" || r.sc.Stderr != "" {
				t.Errorf("a later call's output: stdout %q, stderr %q; want only %q", r.sc.Stdout, r.sc.Stderr, "clean\n")
			}
		}
	})

	t.Run("js timer", func(t *testing.T) {
		r := s.run(t, `import js, asyncio
from pyodide.ffi import create_proxy
js.setInterval(create_proxy(lambda: print("LEAK")), 50)
await asyncio.sleep(0.12)
`)
		wantStatus(t, r, "success")
		for range 3 {
			r := s.run(t, "import asyncio\nawait asyncio.sleep(0.3)\nprint('clean')")
			wantStatus(t, r, "success")
			if r.sc.Stdout != "clean\n" || r.sc.Stderr != "" {
				t.Errorf("a later call's output: stdout %q, stderr %q; want only %q", r.sc.Stdout, r.sc.Stderr, "clean\n")
			}
		}
	})
}

// ---- the command line -------------------------------------------------------

// pyrunCmd runs the binary with args and stdin, returning stdout, stderr and
// the exit status.
func pyrunCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyrunBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		t.Fatalf("pyrun %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String(), code
}

func TestRunCommand(t *testing.T) {
	needBinary(t)
	file := filepath.Join(t.TempDir(), "snippet.py")
	if err := os.WriteFile(file, []byte("print('from a file')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stdin string
		args        []string
		wantCode    int
		wantStatus  string
		wantStdout  string // exactly, when not empty
		wantInBlock string
	}{
		{
			name: "success", stdin: "print('hello')\n1 + 2\n", args: []string{"-"},
			wantCode: 0, wantStatus: "success",
			wantStdout: "<status>success</status>\n<output>\nhello\n</output>\n<return_value>\n3\n</return_value>\n",
		},
		{
			name: "file", args: []string{file},
			wantCode: 0, wantStatus: "success",
			wantStdout: "<status>success</status>\n<output>\nfrom a file\n</output>\n",
		},
		{
			name: "python error", stdin: "print('before')\n1 / 0\n", args: []string{"-"},
			wantCode: 1, wantStatus: "run-error", wantInBlock: "ZeroDivisionError",
		},
		{
			name: "timeout", stdin: "print('before the loop')\nwhile True:\n    pass\n", args: []string{"--timeout", "1s", "-"},
			wantCode: 124, wantStatus: "timeout", wantInBlock: "before the loop",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := pyrunCmd(t, tc.stdin, append([]string{"run"}, tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			if tc.wantStdout != "" && stdout != tc.wantStdout {
				t.Errorf("stdout:\n%q\nwant:\n%q", stdout, tc.wantStdout)
			}
			block, ok := strings.CutSuffix(stdout, "\n")
			if !ok {
				t.Fatalf("stdout does not end with a newline: %q", stdout)
			}
			secs, err := parseBlock(block)
			if err != nil {
				t.Fatalf("stdout is not just the result block: %v\n%s", err, stdout)
			}
			if secs["status"] != tc.wantStatus {
				t.Errorf("status %q, want %q", secs["status"], tc.wantStatus)
			}
			if !strings.Contains(block, tc.wantInBlock) {
				t.Errorf("stdout lacks %q:\n%s", tc.wantInBlock, stdout)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	needBinary(t)
	stdout, stderr, code := pyrunCmd(t, "", "version")
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^pyrun \S+$`),
		regexp.MustCompile(`^deno \d+\.\d+\.\d+\b`),
		regexp.MustCompile(`^pyodide \d+\.\d+\.\d+$`),
		regexp.MustCompile(`^python 3\.\d+\.\d+$`),
	}
	// Then every language, with its engine's versions.
	for _, l := range lang.All() {
		if l.ID == "python" {
			want = append(want, regexp.MustCompile(`^language python: run_python_code, pyodide \d+\.\d+\.\d+, python 3\.\d+\.\d+$`))
			continue
		}
		want = append(want, regexp.MustCompile(`^language `+l.ID+`: run_\w+_code, \w+ \S+(, \w+ \S+)*$`))
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d is %q, want it to match %s", i+1, lines[i], re)
		}
	}
}

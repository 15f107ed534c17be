package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/codemode/codemodetest"
	"github.com/pyrun/pyrun/mcp/mcptest"
)

func testLog(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "codemode", Output: testlog.Writer(t), Level: hclog.Debug})
}

// newHub starts a hub on servers and stops it with the test.
func newHub(t *testing.T, opts codemode.Options, servers map[string]codemode.Server) *codemode.Hub {
	t.Helper()
	hub := codemode.New(opts, "test", testLog(t))
	hub.Configure(servers)
	t.Cleanup(hub.Close)
	return hub
}

func memory(t *testing.T, allow ...string) codemode.Server {
	cmd, args := codemodetest.Command(t, "memory")
	return codemode.Server{Command: cmd, Args: args, Allow: allow,
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")}}
}

func everything(t *testing.T, timeout time.Duration, allow ...string) codemode.Server {
	cmd, args := codemodetest.Command(t, "everything", "stdio")
	return codemode.Server{Command: cmd, Args: args, Allow: allow, Timeout: codemode.Duration(timeout)}
}

func call(t *testing.T, c *codemode.Caller, ctx context.Context, server, tool string, args any) (map[string]any, error) {
	t.Helper()
	b, _ := json.Marshal(args)
	res, err := c.Call(ctx, server, tool, b)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(res, &m); err != nil {
		t.Fatalf("result %s: %v", res, err)
	}
	return m, nil
}

func text(res map[string]any) string {
	var out []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			out = append(out, m["text"].(string))
		}
	}
	return strings.Join(out, "\n")
}

func TestParseServers(t *testing.T) {
	good := `{"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "/tmp/m.jsonl"}, "allow": ["read_graph"], "timeout": "5s"},
	          "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}, "type": "http", "timeout": 2}}`
	s, err := codemode.ParseServers([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s["memory"].Timeout != codemode.Duration(5*time.Second) || s["remote"].Timeout != codemode.Duration(2*time.Second) {
		t.Errorf("timeouts: %v %v", s["memory"].Timeout, s["remote"].Timeout)
	}
	for _, tc := range []struct{ config, want string }{
		{`[]`, "must be an object"},
		{`{"m": {}}`, "give command"},
		{`{"m": {"command": "x", "url": "http://a"}}`, "not both"},
		{`{"m": {"command": "x", "alow": ["a"]}}`, `unknown field "alow"`},
		{`{"m": {"url": "ftp://a"}}`, "not an http or https URL"},
		{`{"m": {"url": "http://a", "env": {"A": "b"}}}`, "args, env and cwd"},
		{`{"m": {"command": "x", "headers": {"A": "b"}}}`, "headers are for"},
		{`{"m": {"command": "x", "timeout": "soon"}}`, "timeout"},
		{`{"m": {"command": "x", "type": "sse"}}`, "type must be"},
		{`{"1m": {"command": "x"}}`, "not a server name"},
		{`{"m": {"command": "x", "allow": [""]}}`, "empty tool name"},
	} {
		if _, err := codemode.ParseServers([]byte(tc.config)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.config, err, tc.want)
		}
	}
}

// TestCalls checks a call's way through pyrun against real servers: the
// allow list, the input schema (before the server sees the call), the
// limits, and the tool's own errors.
func TestCalls(t *testing.T) {
	hub := newHub(t, codemode.Options{MaxCalls: 9, MaxResult: 2048}, map[string]codemode.Server{
		"memory":     memory(t, "create_entities", "read_graph"),
		"everything": everything(t, 2*time.Second, "get-sum", "echo", "trigger-long-running-operation"),
	})
	ctx := t.Context()
	c, catalog := hub.ForRun(ctx, "run-1")
	if c == nil || !strings.Contains(string(catalog), `"create_entities"`) || strings.Contains(string(catalog), "delete_entities") {
		t.Fatalf("catalog: %s", catalog)
	}

	res, err := call(t, c, ctx, "memory", "create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "Ada", "entityType": "person", "observations": []any{"programmer"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text(res), "Ada") {
		t.Errorf("create_entities: %v", res)
	}

	// Not in the allow list, no such server: refused.
	if _, err := call(t, c, ctx, "memory", "delete_entities", map[string]any{"entityNames": []any{"Ada"}}); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("delete_entities: %v, want not allowed", err)
	}
	if _, err := call(t, c, ctx, "nothere", "x", map[string]any{}); err == nil || !strings.Contains(err.Error(), `no MCP server "nothere"`) {
		t.Errorf("unknown server: %v", err)
	}

	// An entity without its entityType fails the schema: the server never
	// sees it, so the graph does not hold it.
	if _, err := call(t, c, ctx, "memory", "create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "Bob", "observations": []any{}}}}); err == nil || !strings.Contains(err.Error(), "invalid arguments for memory.create_entities") {
		t.Errorf("schema: %v", err)
	}
	res, err = call(t, c, ctx, "memory", "read_graph", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if g := text(res); !strings.Contains(g, "Ada") || strings.Contains(g, "Bob") {
		t.Errorf("graph after a refused call: %s", g)
	}

	// A tool's own error is a result with isError, for Python's ToolError.
	res, err = call(t, c, ctx, "everything", "get-sum", map[string]any{"a": 1, "b": 2})
	if err != nil || !strings.Contains(text(res), "3") {
		t.Errorf("get-sum: %v %v", res, err)
	}

	// Results are capped at MaxResult, visibly.
	b, _ := json.Marshal(map[string]any{"message": strings.Repeat("x", 10000)})
	raw, err := c.Call(ctx, "everything", "echo", b)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 2048+512 || !strings.Contains(string(raw), "exceeded the limit of 2048 bytes") {
		t.Errorf("echo of 10000 bytes with MaxResult 2048: %d bytes: %.300s", len(raw), raw)
	}

	// The server's timeout bounds a call that hangs.
	began := time.Now()
	_, err = call(t, c, ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 1})
	if err == nil || !strings.Contains(err.Error(), "did not answer within 2s") {
		t.Errorf("hanging tool: %v", err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("hanging tool took %s with a timeout of 2s", d)
	}

	// The run's own context ends its calls.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := call(t, c, cctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 1})
		done <- err
	}()
	cancel()
	// Cancelled while it ran ("stopped"), or before it could start: either
	// way the run's end ended it. (TestCodeMode's cancel case stops a call
	// that is running for sure.)
	if err := mcptest.Receive(t, done, 30*time.Second, "a cancelled call did not end"); err == nil || !(strings.Contains(err.Error(), "stopped") || strings.Contains(err.Error(), "the run ended before the tool call could start")) {
		t.Errorf("cancelled call: %v", err)
	}

	// MaxCalls: nine calls so far, refused ones too; the tenth is refused.
	if _, err := call(t, c, ctx, "everything", "get-sum", map[string]any{"a": 1, "b": 2}); err == nil || !strings.Contains(err.Error(), "limit of 9 tool calls") {
		t.Errorf("call past MaxCalls: %v", err)
	}
	// Another run has its own count.
	c2, _ := hub.ForRun(ctx, "run-2")
	if _, err := call(t, c2, ctx, "everything", "get-sum", map[string]any{"a": 1, "b": 2}); err != nil {
		t.Errorf("a new run: %v", err)
	}
}

// TestConcurrency: with Concurrency 1, two calls of a run that each take a
// second take two seconds together; with 2, they overlap.
func TestConcurrency(t *testing.T) {
	for _, n := range []int{1, 2} {
		hub := newHub(t, codemode.Options{Concurrency: n}, map[string]codemode.Server{
			"everything": everything(t, 0, "trigger-long-running-operation"),
		})
		c, _ := hub.ForRun(t.Context(), "run")
		// Warm the connection, so that its start is not timed.
		if _, err := call(t, c, t.Context(), "everything", "trigger-long-running-operation", map[string]any{"duration": 0.01, "steps": 1}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if _, err := call(t, c, t.Context(), "everything", "trigger-long-running-operation", map[string]any{"duration": 1.5, "steps": 1}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		d := time.Since(began)
		if n == 1 && d < 3*time.Second {
			t.Errorf("Concurrency 1: two calls of 1.5s took %s, want at least 3s", d)
		}
		if n == 2 && d >= 3*time.Second {
			// Overlapping calls take about 1.5s; a loaded machine may stretch that, but not to their sum... usually.
			t.Logf("Concurrency 2: two calls of 1.5s took %s (the machine is loaded?)", d)
		}
	}
}

// TestRestart: a stdio server that dies is started again, and the calls
// after it work; the call it dies in fails with a clear error.
func TestRestart(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	node, args := codemodetest.Command(t, "everything", "stdio")
	srv := codemode.Server{
		Command: "/bin/sh",
		Args:    append([]string{"-c", `echo $$ > "$0"; exec "$@"`, pidFile, node}, args...),
		Allow:   []string{"get-sum", "trigger-long-running-operation"},
	}
	hub := newHub(t, codemode.Options{}, map[string]codemode.Server{"everything": srv})
	ctx := t.Context()
	c, _ := hub.ForRun(ctx, "run")
	if _, err := call(t, c, ctx, "everything", "get-sum", map[string]any{"a": 1, "b": 1}); err != nil {
		t.Fatal(err)
	}
	first := readPid(t, pidFile)

	done := make(chan error, 1)
	go func() {
		_, err := call(t, c, ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 1})
		done <- err
	}()
	if p, err := os.FindProcess(first); err != nil {
		t.Fatal(err)
	} else if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	err := mcptest.Receive(t, done, 30*time.Second, "the call the server died in did not end")
	if err == nil || !strings.Contains(err.Error(), "everything") {
		t.Errorf("the call the server died in: %v", err)
	}
	t.Logf("the call the server died in: %v", err)
	// The next run's calls reach the restarted server: ForRun waits while
	// it reconnects, and a call that finds it still connecting waits too.
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, _ := hub.ForRun(ctx, "run-2")
		_, err := call(t, c, ctx, "everything", "get-sum", map[string]any{"a": 2, "b": 2})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not restarted: %v", err)
		}
		t.Logf("not yet: %v", err)
	}
	if second := readPid(t, pidFile); second == first {
		t.Errorf("the same process %d after the restart", second)
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestUnavailable: a server that cannot start is left out, with why, and
// does not hold up the others.
func TestUnavailable(t *testing.T) {
	hub := newHub(t, codemode.Options{}, map[string]codemode.Server{
		"broken": {Command: "/nonexistent/mcp-server", Allow: []string{"x"}},
		"memory": memory(t, "read_graph"),
	})
	c, catalog := hub.ForRun(t.Context(), "run")
	if !strings.Contains(string(catalog), "not available") {
		t.Errorf("catalog does not say the broken server is not available: %s", catalog)
	}
	if _, err := call(t, c, t.Context(), "memory", "read_graph", map[string]any{}); err != nil {
		t.Error(err)
	}
	if _, err := call(t, c, t.Context(), "broken", "x", map[string]any{}); err == nil || !strings.Contains(err.Error(), "not available") {
		t.Errorf("call to a server that never started: %v", err)
	}
	if d := hub.Describe(); !strings.Contains(d, "mcp_tools.broken (not available") || !strings.Contains(d, "async def read_graph()") {
		t.Errorf("description:\n%s", d)
	}
}

// TestReconfigure: removing a server lets its running call finish; adding
// one makes its tools appear.
func TestReconfigure(t *testing.T) {
	ev := everything(t, 0, "trigger-long-running-operation")
	hub := newHub(t, codemode.Options{}, map[string]codemode.Server{"everything": ev})
	ctx := t.Context()
	c, _ := hub.ForRun(ctx, "run")
	if _, err := call(t, c, ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 0.01, "steps": 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := call(t, c, ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 2, "steps": 1})
		if err == nil && !strings.Contains(text(res), "completed") {
			err = fmt.Errorf("result %v", res)
		}
		done <- err
	}()
	// Wait until the call is counted on the server, then remove it.
	mcptest.Eventually(t, 60*time.Second, "the call to start", func() bool { return hub.Busy("everything") > 0 })
	hub.Configure(map[string]codemode.Server{"memory": memory(t, "read_graph")})
	if err := <-done; err != nil {
		t.Errorf("a call running while its server was removed: %v", err)
	}
	c2, catalog := hub.ForRun(ctx, "run-2")
	if strings.Contains(string(catalog), "everything") || !strings.Contains(string(catalog), "read_graph") {
		t.Errorf("catalog after the reload: %s", catalog)
	}
	if _, err := call(t, c2, ctx, "everything", "trigger-long-running-operation", map[string]any{}); err == nil {
		t.Error("a removed server still takes calls")
	}
}

// TestToolListChanged: a Streamable HTTP server (the go-sdk's) that adds a
// tool tells pyrun, whose catalog then has it; its description changes.
func TestToolListChanged(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "changing", Version: "1"}, nil)
	type args struct {
		X int `json:"x" jsonschema:"a number"`
	}
	double := func(ctx context.Context, req *sdk.CallToolRequest, a args) (*sdk.CallToolResult, map[string]int, error) {
		return nil, map[string]int{"y": 2 * a.X}, nil
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "double", Description: "Doubles x."}, double)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close) // after the hub closes: its event stream holds the server open

	hub := newHub(t, codemode.Options{}, map[string]codemode.Server{
		"remote": {URL: hs.URL, Allow: []string{"double", "triple"}},
	})
	changed := make(chan struct{}, 16)
	hub.OnChange(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	c, catalog := hub.ForRun(t.Context(), "run")
	if !strings.Contains(string(catalog), "double") || strings.Contains(string(catalog), "triple") {
		t.Fatalf("catalog: %s", catalog)
	}
	res, err := call(t, c, t.Context(), "remote", "double", map[string]any{"x": 21})
	if err != nil {
		t.Fatal(err)
	}
	if sc, _ := json.Marshal(res["structuredContent"]); string(sc) != `{"y":42}` {
		t.Errorf("structured content %s", sc)
	}
	// Refused in plain words, not in the schema validator's.
	if _, err := call(t, c, t.Context(), "remote", "double", map[string]any{"x": "many"}); err == nil ||
		!strings.Contains(err.Error(), `invalid arguments for remote.double: x must be an integer, not a string ("many")`) {
		t.Errorf("schema: %v", err)
	}

	sdk.AddTool(srv, &sdk.Tool{Name: "triple", Description: "Triples x."}, double)
	deadline := time.After(60 * time.Second)
	for !strings.Contains(hub.Describe(), "async def triple(*, x: int)") {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the new tool never appeared:\n%s", hub.Describe())
		}
	}
	if _, err := call(t, c, t.Context(), "remote", "triple", map[string]any{"x": 1}); err != nil {
		t.Error(err)
	}
}

// TestDescribeBounded: a listing past MaxListing is summarised.
func TestDescribeBounded(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "many", Version: "1"}, nil)
	var allow []string
	for i := range 60 {
		name := fmt.Sprintf("tool_number_%02d_with_a_long_name", i)
		allow = append(allow, name)
		sdk.AddTool(srv, &sdk.Tool{Name: name, Description: "Does thing number " + strconv.Itoa(i) + " with great care. More words follow."},
			func(ctx context.Context, req *sdk.CallToolRequest, a struct {
				Query string `json:"query"`
			}) (*sdk.CallToolResult, any, error) {
				return nil, nil, errors.New("unused")
			})
	}
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close) // after the hub closes: its event stream holds the server open
	for _, tc := range []struct {
		max  int
		want string
	}{
		{64 << 10, "async def tool_number_59_with_a_long_name(*, query: str): Does thing number 59 with great care."},
		{4 << 10, "mcp_tools.many: tool_number_00_with_a_long_name, tool_number_01_with_a_long_name"},
		{1 << 10, "mcp_tools.many: 60 functions"},
	} {
		hub := newHub(t, codemode.Options{MaxListing: tc.max}, map[string]codemode.Server{"many": {URL: hs.URL, Allow: allow}})
		hub.ForRun(t.Context(), "settle")
		d := hub.Describe()
		if !strings.Contains(d, tc.want) {
			t.Errorf("MaxListing %d: no %q in\n%s", tc.max, tc.want, d)
		}
		if !strings.Contains(d, "help(mcp_tools.<server>)") || len(d) > tc.max+2048 {
			t.Errorf("MaxListing %d: %d bytes:\n%s", tc.max, len(d), d)
		}
	}
}

// TestDescriptionsCleaned: what a server writes about its tools reaches
// the model's tool description and the code's docstrings without control
// or bidirectional characters, and bounded.
func TestDescriptionsCleaned(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "noisy", Version: "1"}, nil)
	desc := "Reads\x1b[2J\x1b]0;owned\x07 the \u202egnirts\u202c file\u200b. " + strings.Repeat("More words. ", 20000)
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"mode": map[string]any{"type": "string", "enum": []any{"fast\u202e", strings.Repeat("slow", 1000)}},
		"path": map[string]any{"type": "string", "default": "/tmp/\x1b[31m" + strings.Repeat("p", 1000)},
	}}
	srv.AddTool(&sdk.Tool{Name: "read", Description: desc, InputSchema: schema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return nil, errors.New("unused")
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	hub := newHub(t, codemode.Options{MaxListing: 64 << 10}, map[string]codemode.Server{"noisy": {URL: hs.URL, Allow: []string{"read"}}})
	hub.ForRun(t.Context(), "settle")

	d := hub.Describe()
	var catalog struct {
		Servers []struct {
			Tools []struct{ Description string }
		}
	}
	if err := json.Unmarshal(hub.Catalog(), &catalog); err != nil || len(catalog.Servers) != 1 || len(catalog.Servers[0].Tools) != 1 {
		t.Fatalf("catalog: %v %s", err, hub.Catalog())
	}
	doc := catalog.Servers[0].Tools[0].Description
	for what, s := range map[string]string{"the description": d, "the docstring": doc} {
		if i := strings.IndexFunc(s, func(r rune) bool {
			return r == 0x1b || r == 0x07 || r == '\u202e' || r == '\u202c' || r == '\u200b'
		}); i >= 0 {
			t.Errorf("%s holds %q: %q", what, []rune(s[i:])[0], s[max(0, i-20):min(len(s), i+20)])
		}
	}
	if !strings.Contains(d, "async def read(*, mode: Literal['fast', 'slow") || !strings.Contains(d, ": Reads[2J]0;owned the gnirts file.") {
		t.Errorf("description:\n%s", d)
	}
	if len(d) > 3<<10 {
		t.Errorf("description of %d bytes for one tool:\n%s", len(d), d)
	}
	if len(doc) > 4<<10 || !strings.HasPrefix(doc, "Reads[2J]0;owned the gnirts file. More words.") || !strings.HasSuffix(doc, "...") {
		t.Errorf("docstring of %d bytes: %.200q...", len(doc), doc)
	}
}

package main

// Code mode end to end: pyrun stdio with mcp_servers in its config file,
// connected to real MCP servers from npm (mcp/codemode/codemodetest), driven
// by the go-sdk client; Python calls their tools through mcp_tools.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/mcp/codemode/codemodetest"
)

// canary is in the everything server's environment; Python must never see it.
const canary = "pyrun-canary-4f1d2c9e"

// codeModeConfig writes a config file with mcp_servers and returns its path.
func codeModeConfig(t *testing.T, servers map[string]any, extra map[string]any) string {
	t.Helper()
	cfg := map[string]any{"mcp_servers": servers}
	for k, v := range extra {
		cfg[k] = v
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pyrun.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func stdioServer(t *testing.T, name string, env map[string]string, allow []string, extra ...string) map[string]any {
	cmd, args := codemodetest.Command(t, name, extra...)
	s := map[string]any{"command": cmd, "args": args, "allow": allow}
	if env != nil {
		s["env"] = env
	}
	return s
}

// liveLines follows what pyrun tells the client on its own.
type liveLines struct {
	changed chan struct{} // notifications/tools/list_changed
}

func (l *liveLines) options() *sdk.ClientOptions {
	l.changed = make(chan struct{}, 16)
	return &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}}
}

func newCodeModeServer(t *testing.T, lines *liveLines, args ...string) *server {
	t.Helper()
	needBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	var copts *sdk.ClientOptions
	if lines != nil {
		copts = lines.options()
	}
	s, err := startServerWith(ctx, copts, args...)
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)
	return s
}

// TestCodeMode: one pyrun with three real servers; each case is one
// run_python_code call.
func TestCodeMode(t *testing.T) {
	needBinary(t)
	files := t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "notes.txt"), []byte("Ada wrote the first program.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := stdioServer(t, "everything", map[string]string{"PYRUN_CANARY": canary},
		[]string{"get-sum", "echo", "get-tiny-image", "get-structured-content", "trigger-long-running-operation"}, "stdio")
	ev["timeout"] = "3s"
	config := codeModeConfig(t, map[string]any{
		"memory": stdioServer(t, "memory", map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
			[]string{"create_entities", "create_relations", "read_graph", "search_nodes"}),
		"everything": ev,
		"files":      stdioServer(t, "filesystem", nil, []string{"read_text_file", "list_directory"}, files),
	}, map[string]any{"max_tool_calls": 12})
	lines := &liveLines{}
	s := newCodeModeServer(t, lines, "--config", config, "--workers", "2")

	t.Run("description", func(t *testing.T) {
		// Servers that connect after pyrun is up change the description:
		// clients are told the tool list changed.
		var d string
		deadline := time.After(callTimeout)
		for {
			tools, err := s.session.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d = tools.Tools[0].Description; !strings.Contains(d, "(connecting)") {
				break
			}
			select {
			case <-lines.changed:
			case <-deadline:
				t.Fatalf("servers still connecting:\n%s", d)
			}
		}
		for _, want := range []string{
			"import mcp_tools",
			"mcp_tools.memory:",
			"async def create_entities(*, entities: list[",
			"async def get_sum(*, a: float, b: float): Returns the sum of two numbers",
			"mcp_tools.files:",
			"At most 12 tool calls per run",
			"help(mcp_tools.<server>)",
		} {
			if !strings.Contains(d, want) {
				t.Errorf("description lacks %q:\n%s", want, d)
			}
		}
		if strings.Contains(d, "get_env") || strings.Contains(d, "delete_entities") {
			t.Errorf("description lists tools that are not allowed:\n%s", d)
		}
	})

	t.Run("combine", func(t *testing.T) {
		// Several tools of three servers in one program; only the answer returns.
		r := s.run(t, fmt.Sprintf(`import mcp_tools
m, f, e = mcp_tools.memory, mcp_tools.files, mcp_tools.everything
await m.create_entities(entities=[
    {"name": "Ada", "entityType": "person", "observations": ["programmer"]},
    {"name": "Charles", "entityType": "person", "observations": ["engineer"]},
])
await m.create_relations(relations=[{"from": "Ada", "to": "Charles", "relationType": "worked with"}])
graph = await m.read_graph()
listing = await f.list_directory(path=%q)
note = await f.read_text_file(path=%q)
total = await e.get_sum(a=len(graph["entities"]), b=len(graph["relations"]))
weather = await e.get_structured_content(location="New York")
{"people": sorted(x["name"] for x in graph["entities"]), "files": listing, "note": str(note),
 "total": total, "weather_keys": sorted(weather)}`, files, filepath.Join(files, "notes.txt")))
		wantStatus(t, r, "success")
		var v struct {
			People      []string `json:"people"`
			Files       any      `json:"files"`
			Note        any      `json:"note"`
			Total       string   `json:"total"`
			WeatherKeys []string `json:"weather_keys"`
		}
		if err := json.Unmarshal(r.sc.ReturnValue, &v); err != nil {
			t.Fatalf("%v: %s", err, r.sc.ReturnValue)
		}
		if strings.Join(v.People, ",") != "Ada,Charles" || !strings.Contains(fmt.Sprint(v.Files), "notes.txt") ||
			!strings.Contains(fmt.Sprint(v.Note), "first program") || !strings.Contains(v.Total, "is 3") ||
			!strings.Contains(strings.Join(v.WeatherKeys, ","), "temperature") {
			t.Errorf("combined result: %s", r.sc.ReturnValue)
		}
	})

	t.Run("help", func(t *testing.T) {
		r := s.run(t, "import mcp_tools\nhelp(mcp_tools.memory)")
		wantStatus(t, r, "success")
		for _, want := range []string{"async create_entities(*, entities: list[", "Create multiple new entities", "async read_graph()"} {
			if !strings.Contains(r.sc.Stdout, want) {
				t.Errorf("help(mcp_tools.memory) lacks %q:\n%s", want, r.sc.Stdout)
			}
		}
	})

	t.Run("allow list", func(t *testing.T) {
		// get-env is not allowed: not in the namespace, and refused when
		// called by name, so the server's environment stays out of reach.
		r := s.run(t, `import mcp_tools
try:
    await mcp_tools.call("everything", "get-env")
except mcp_tools.ToolError as e:
    err = str(e)
[hasattr(mcp_tools.everything, "get_env"), err]`)
		wantValue(t, r, `[false, "pyrun: the tool \"get-env\" of the MCP server \"everything\" is not allowed (its allow list in mcp_servers)"]`)
	})

	t.Run("schema", func(t *testing.T) {
		// Arguments that fail the schema are refused before the server sees
		// them: the entity without its type is not in the graph.
		r := s.run(t, `import mcp_tools
errs = []
for bad in ([{"name": "Nobody", "observations": []}], "not a list"):
    try:
        await mcp_tools.memory.create_entities(entities=bad)
    except mcp_tools.ToolError as e:
        errs.append(str(e).split(":")[0])
try:
    await mcp_tools.everything.get_sum(a=1)
except TypeError as e:
    errs.append(str(e).startswith("everything.get-sum: missing a required"))
found = await mcp_tools.memory.search_nodes(query="Nobody")
[errs, found["entities"]]`)
		wantValue(t, r, `[["invalid arguments for memory.create_entities", "invalid arguments for memory.create_entities", true], []]`)
	})

	t.Run("tool error", func(t *testing.T) {
		// The server's own error (a path outside its folder) is a ToolError.
		r := s.run(t, `import mcp_tools
try:
    await mcp_tools.files.read_text_file(path="/etc/hostname")
except mcp_tools.ToolError as e:
    r = [e.server, e.tool, "denied" in str(e).lower() or "outside" in str(e).lower()]
r`)
		wantValue(t, r, `["files", "read_text_file", true]`)
	})

	t.Run("image", func(t *testing.T) {
		r := s.run(t, `import mcp_tools
items = await mcp_tools.everything.get_tiny_image()
imgs = [x for x in (items if isinstance(items, list) else [items]) if isinstance(x, mcp_tools.Image)]
[len(imgs), imgs[0].mime_type, bytes(imgs[0])[:8] == b"\x89PNG\r\n\x1a\n"]`)
		wantValue(t, r, `[1, "image/png", true]`)
	})

	t.Run("gather", func(t *testing.T) {
		r := s.run(t, `import asyncio, mcp_tools
sums = await asyncio.gather(*(mcp_tools.everything.get_sum(a=i, b=i) for i in range(6)))
[s.split()[-1] for s in sums]`)
		wantValue(t, r, `["0.", "2.", "4.", "6.", "8.", "10."]`)
	})

	t.Run("hanging tool", func(t *testing.T) {
		// The server's timeout (3s) ends a call that would take a minute;
		// the run goes on.
		began := time.Now()
		r := s.run(t, `import mcp_tools
try:
    await mcp_tools.everything.trigger_long_running_operation(duration=60, steps=1)
except mcp_tools.ToolError as e:
    err = str(e)
err`)
		wantValue(t, r, `"pyrun: everything.trigger-long-running-operation did not answer within 3s (the server's timeout)"`)
		if d := time.Since(began); d > 40*time.Second {
			t.Errorf("took %s", d)
		}
	})

	t.Run("max tool calls", func(t *testing.T) {
		r := s.run(t, `import mcp_tools
done = 0
try:
    for i in range(20):
        await mcp_tools.everything.echo(message=str(i))
        done += 1
except mcp_tools.ToolError as e:
    err = str(e)
[done, err]`)
		wantValue(t, r, `[12, "pyrun: this run reached its limit of 12 tool calls (max_tool_calls)"]`)
	})

	t.Run("canary", func(t *testing.T) {
		// The server's environment is pyrun's business: no way the sandbox
		// tries reaches it.
		r := s.run(t, `import os, js
seen = [dict(os.environ)]
for attempt in (lambda: js.Deno.env.toObject(), lambda: open("/proc/self/environ").read(),
                lambda: js.Deno.readTextFileSync("/proc/self/environ"),
                lambda: js.Deno.readTextFileSync("/proc/%d/environ" % os.getppid())):
    try:
        seen.append(str(attempt()))
    except Exception as e:
        seen.append(type(e).__name__)
str(seen)`)
		wantStatus(t, r, "success")
		if strings.Contains(r.text, canary) {
			t.Fatalf("the canary reached the sandbox: %s", r.text)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		// Cancelling the run cancels its tool call at once.
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		before, started := s.log.count("tool call"), s.log.count("tool call started")
		go func() {
			_, err := s.callRaw(ctx, map[string]any{"python_code": `import mcp_tools
await mcp_tools.everything.trigger_long_running_operation(duration=2.5, steps=1)`})
			done <- err
		}()
		waitStarted(t, s, started)
		began := time.Now()
		cancel()
		<-done
		wctx, wcancel := context.WithTimeout(t.Context(), callTimeout)
		defer wcancel()
		if err := s.log.waitFor(wctx, "the tool call's log line", func(c map[string]int) bool { return c["tool call"] > before }); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d > 2*time.Second && !strings.Contains(s.log.tail(), `"status":"cancelled"`) {
			t.Errorf("the tool call was not cancelled with its run (%s):\n%s", d, s.log.tail())
		}
		if !strings.Contains(s.log.tail(), `"status":"cancelled"`) {
			t.Errorf("no cancelled tool call in the log:\n%s", s.log.tail())
		}
		wantValue(t, s.run(t, "import mcp_tools\nawait mcp_tools.everything.echo(message='after')"), `"Echo: after"`)
	})
}

// waitStarted waits until pyrun has started more than n tool calls.
func waitStarted(t *testing.T, s *server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "a tool call to start", func(c map[string]int) bool { return c["tool call started"] > n }); err != nil {
		t.Fatal(err)
	}
}

// TestCodeModeCrash: a server that dies during a run gives that run a clear
// error, is started again, and the next run's calls work.
func TestCodeModeCrash(t *testing.T) {
	needBinary(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	node, args := codemodetest.Command(t, "everything", "stdio")
	config := codeModeConfig(t, map[string]any{"everything": map[string]any{
		"command": "/bin/sh",
		"args":    append([]string{"-c", `echo $$ > "$0"; exec "$@"`, pidFile, node}, args...),
		"allow":   []string{"get-sum", "trigger-long-running-operation"},
	}}, nil)
	s := newCodeModeServer(t, nil, "--config", config, "--workers", "1")
	done := make(chan result, 1)
	go func() {
		r, err := s.call(t.Context(), map[string]any{"python_code": `import mcp_tools
await mcp_tools.everything.get_sum(a=1, b=1)
try:
    await mcp_tools.everything.trigger_long_running_operation(duration=60, steps=1)
except mcp_tools.ToolError as e:
    err = str(e)
err`})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitStarted(t, s, 1) // the long call: the first was get_sum
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	killPID(t, pid)
	r := <-done
	wantStatus(t, r, "success")
	if !strings.Contains(string(r.sc.ReturnValue), `failed during the call`) {
		t.Errorf("the run the server died in: %s", r.sc.ReturnValue)
	}
	wantValue(t, s.run(t, "import mcp_tools\nawait mcp_tools.everything.get_sum(a=2, b=3)"), `"The sum of 2 and 3 is 5."`)
	if n := s.log.count("MCP server connected"); n != 2 {
		t.Errorf("connected %d times, want 2 (once at start, once after the crash)", n)
	}
}

// TestCodeModeHTTP: a Streamable HTTP server (server-everything's HTTP
// mode) on loopback: pyrun reaches it, the sandbox does not.
func TestCodeModeHTTP(t *testing.T) {
	needBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	node, args := codemodetest.Command(t, "everything", "streamableHttp")
	cmd := exec.Command(node, args...)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	// A readiness probe, not a sleep: the server listens once it is up.
	deadline := time.Now().Add(callTimeout)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything never listened on %d: %s", port, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	config := codeModeConfig(t, map[string]any{
		"remote": map[string]any{"url": url, "headers": map[string]string{"X-Pyrun-Test": "1"}, "allow": []string{"get-sum", "echo"}},
	}, nil)
	s := newCodeModeServer(t, nil, "--config", config, "--workers", "1")
	r := s.run(t, fmt.Sprintf(`import mcp_tools, pyodide.http
direct = None
try:
    await pyodide.http.pyfetch(%q, method="POST")
except Exception as e:
    direct = type(e).__name__
[await mcp_tools.remote.get_sum(a=20, b=22), await mcp_tools.remote.echo(message="over http"), direct]`, url))
	wantStatus(t, r, "success")
	var v []any
	_ = json.Unmarshal(r.sc.ReturnValue, &v)
	if len(v) != 3 || v[0] != "The sum of 20 and 22 is 42." || v[1] != "Echo: over http" || v[2] == nil {
		t.Errorf("over HTTP: %s", r.sc.ReturnValue)
	}
}

// TestCodeModeIsolationProcess: with a new worker per call, tool calls work
// the same.
func TestCodeModeIsolationProcess(t *testing.T) {
	needBinary(t)
	config := codeModeConfig(t, map[string]any{
		"memory": stdioServer(t, "memory", map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "m.jsonl")},
			[]string{"create_entities", "read_graph"}),
	}, nil)
	s := newCodeModeServer(t, nil, "--config", config, "--workers", "2", "--isolation", "process")
	wantValue(t, s.run(t, `import mcp_tools
r = await mcp_tools.memory.create_entities(entities=[{"name": "P", "entityType": "t", "observations": []}])
len(r)`), "1")
	wantValue(t, s.run(t, `import mcp_tools
[e["name"] for e in (await mcp_tools.memory.read_graph())["entities"]]`), `["P"]`)
}

// TestCodeModeFlags: code mode's settings reach the hub from the config
// file and flags, with their defaults; bad ones are refused with the key.
func TestCodeModeFlags(t *testing.T) {
	o, _, err := loadOptions("stdio", nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := o.hubOptions(); h.MaxCalls != 50 || h.Concurrency != 4 || h.MaxListing != 8<<10 || h.MaxResult != 64<<10 || h.MaxMessage != 16<<20 {
		t.Errorf("defaults: %+v", h)
	}
	cfg := filepath.Join(t.TempDir(), "pyrun.json")
	if err := writeFile(cfg, `{"mcp_servers": {"m": {"command": "node", "args": ["x.js"], "allow": ["a"], "timeout": "5s"}},
		"max_tool_calls": 7, "tool_concurrency": 2, "max_tool_listing": "2KiB", "max_output": "4KiB", "max_tool_message": "1MiB"}`); err != nil {
		t.Fatal(err)
	}
	o, _, err = loadOptions("stdio", []string{"--config", cfg})
	if err != nil {
		t.Fatal(err)
	}
	if h := o.hubOptions(); h.MaxCalls != 7 || h.Concurrency != 2 || h.MaxListing != 2<<10 || h.MaxResult != 4<<10 || h.MaxMessage != 1<<20 {
		t.Errorf("from the file: %+v", h)
	}
	if m := o.mcpServers.servers["m"]; m.Command != "node" || len(m.Allow) != 1 || time.Duration(m.Timeout) != 5*time.Second {
		t.Errorf("mcp_servers: %+v", o.mcpServers.servers)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-tool-calls", "0"}, "max-tool-calls"},
		{[]string{"--tool-concurrency", "100"}, "tool-concurrency"},
		{[]string{"--max-tool-listing", "10"}, "max-tool-listing"},
		{[]string{"--max-tool-message", "1KiB"}, "max-tool-message"},
		{[]string{"--mcp-servers", `{"m": {"command": "x", "alow": []}}`}, "mcp_servers.m"},
	} {
		if _, _, err := loadOptions("stdio", bad.args); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %s", bad.args, err, bad.want)
		}
	}
}

// TestCodeModeReload: pyrun serve applies a changed mcp_servers without
// dropping the tool call running on a server it removes.
func TestCodeModeReload(t *testing.T) {
	needBinary(t)
	ev := stdioServer(t, "everything", nil, []string{"trigger-long-running-operation", "echo"}, "stdio")
	mem := stdioServer(t, "memory", map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "m.jsonl")}, []string{"read_graph"})
	cfg := codeModeConfig(t, map[string]any{"everything": ev}, nil)
	s := startServe(t, "--config", cfg, "--workers", "2", "--log-level", "debug")
	c := s.connect(t, "mcp", "", nil)

	mark := s.log.mark()
	done := make(chan result, 1)
	go func() {
		r, err := c.call(t.Context(), map[string]any{"python_code": `import mcp_tools
await mcp_tools.everything.trigger_long_running_operation(duration=3, steps=1)`})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	s.log.waitMsg(t, mark, "tool call started")

	b, err := json.Marshal(map[string]any{"mcp_servers": map[string]any{"memory": mem}})
	if err != nil {
		t.Fatal(err)
	}
	mark = s.log.mark()
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := s.log.waitMsg(t, mark, "config reloaded"); !strings.Contains(fmt.Sprint(r["changed"]), "mcp-servers") {
		t.Errorf("reload changed %v", r["changed"])
	}
	r := <-done
	wantValue(t, r, `"Long running operation completed. Duration: 3 seconds, Steps: 1."`)
	wantValue(t, c.run(t, `import mcp_tools
[sorted(n for n in dir(mcp_tools) if not n.startswith("_")), (await mcp_tools.memory.read_graph())["entities"]]`),
		`[["Image", "ToolError", "call", "memory"], []]`)

	// Tool calls are counted per server and status; servers' states show.
	m := s.metrics(t)
	for key, want := range map[string]float64{
		`pyrun_tool_calls_total{server="everything",status="ok"}`: 1,
		`pyrun_tool_calls_total{server="memory",status="ok"}`:     1,
		`pyrun_tool_call_duration_seconds_count{server="memory"}`: 1,
		`pyrun_mcp_server_up{server="memory"}`:                    1,
	} {
		if m[key] != want {
			t.Errorf("/metrics: %s = %v, want %v", key, m[key], want)
		}
	}
	if _, ok := m[`pyrun_mcp_server_up{server="everything"}`]; ok {
		t.Error("/metrics still has the removed server's state")
	}
}

// TestCodeModeInSession: a Python session's calls call tools too, also
// through a function a previous call of the session kept.
func TestCodeModeInSession(t *testing.T) {
	needBinary(t)
	config := codeModeConfig(t, map[string]any{
		"memory": stdioServer(t, "memory", map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "m.jsonl")},
			[]string{"create_entities", "read_graph"}),
	}, nil)
	s := newCodeModeServer(t, nil, "--config", config, "--workers", "1")
	r := s.inSession(t, "new", `import mcp_tools
read = mcp_tools.memory.read_graph
r = await mcp_tools.memory.create_entities(entities=[{"name": "S", "entityType": "t", "observations": []}])
len(r)`)
	wantValue(t, r, "1")
	id := r.sc.SessionID
	wantValue(t, s.inSession(t, id, `[e["name"] for e in (await read())["entities"]]`), `["S"]`)
	wantValue(t, s.inSession(t, id, `[e["name"] for e in (await mcp_tools.memory.read_graph())["entities"]]`), `["S"]`)
}

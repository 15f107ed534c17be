package main

// End-to-end tests of MCP tasks (docs/contract.md section 17, docs/mcp.md; mcp/tasks.go) over
// `pyrun stdio`, in raw JSON-RPC (the go-sdk has no tasks), both revisions
// that have them: 2025-11-25 (a `task` member in tools/call; tasks/get,
// tasks/result, tasks/list, tasks/cancel) and 2026-07-28 (the tasks
// extension: the server decides; tasks/get with the result inline).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testproc"
)

// rawClient speaks JSON-RPC lines to a pyrun stdio process.
type rawClient struct {
	t     *testing.T
	stdin io.WriteCloser
	mu    sync.Mutex
	next  int
	wait  map[string]chan rawAnswer
}

type rawAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func startRaw(t *testing.T, args ...string) *rawClient {
	t.Helper()
	needBinary(t)
	cmd := exec.Command(pyrunBin, append([]string{"stdio", "--log-format", "json"}, args...)...)
	lw := newLogWatcher()
	cmd.Stderr = lw
	stdin, stdout := testproc.StartPiped(t, cmd)
	c := &rawClient{t: t, stdin: stdin, wait: map[string]chan rawAnswer{}}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m struct {
				ID json.RawMessage `json:"id"`
				rawAnswer
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil || len(m.ID) == 0 {
				continue // notifications
			}
			c.mu.Lock()
			ch := c.wait[string(m.ID)]
			delete(c.wait, string(m.ID))
			c.mu.Unlock()
			if ch != nil {
				ch <- m.rawAnswer
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("pyrun stdio: %v", err)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("pyrun stdio did not exit after its stdin closed")
		}
		if t.Failed() {
			t.Logf("pyrun's stderr:\n%s", lw.tail())
		}
	})
	return c
}

// call sends a request and waits for its answer.
func (c *rawClient) call(method string, params any) rawAnswer {
	c.t.Helper()
	ch := c.send(method, params)
	select {
	case a := <-ch:
		return a
	case <-time.After(callTimeout):
		c.t.Fatalf("%s: no answer", method)
		return rawAnswer{}
	}
}

func (c *rawClient) send(method string, params any) chan rawAnswer {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := fmt.Sprint(c.next)
	ch := make(chan rawAnswer, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
	return ch
}

func (c *rawClient) notify(method string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	_, _ = c.stdin.Write(append(b, '\n'))
}

// ok decodes a's result into v, failing on an error answer.
func (a rawAnswer) ok(t *testing.T, what string, v any) {
	t.Helper()
	if a.Error != nil {
		t.Fatalf("%s: error %d %s", what, a.Error.Code, a.Error.Message)
	}
	if err := json.Unmarshal(a.Result, v); err != nil {
		t.Fatalf("%s: %v in %s", what, err, a.Result)
	}
}

type taskState struct {
	TaskID       string          `json:"taskId"`
	Status       string          `json:"status"`
	CreatedAt    string          `json:"createdAt"`
	TTL          *float64        `json:"ttl"`
	TTLMs        *float64        `json:"ttlMs"`
	PollInterval *float64        `json:"pollInterval"`
	ResultType   string          `json:"resultType"`
	Result       json.RawMessage `json:"result"`
}

func TestTasks20251125(t *testing.T) {
	c := startRaw(t, "--workers", "1", "--attach", "never")
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		Capabilities    struct {
			Tasks *struct {
				List     *struct{} `json:"list"`
				Cancel   *struct{} `json:"cancel"`
				Requests struct {
					Tools struct {
						Call *struct{} `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	c.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}}).ok(t, "initialize", &init)
	c.notify("notifications/initialized")
	if tk := init.Capabilities.Tasks; init.ProtocolVersion != "2025-11-25" || tk == nil || tk.List == nil || tk.Cancel == nil || tk.Requests.Tools.Call == nil {
		t.Fatalf("initialize does not advertise tasks (list, cancel, tools/call): %+v", init)
	}
	var tools struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	c.call("tools/list", map[string]any{}).ok(t, "tools/list", &tools)
	if len(tools.Tools) == 0 || tools.Tools[0].Execution.TaskSupport != "optional" {
		t.Errorf("tools/list: %+v, want run_python_code with execution.taskSupport optional", tools)
	}

	// A task: created at once, its result from tasks/result.
	var created struct {
		Task taskState `json:"task"`
	}
	c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{"ttl": 60000},
		"arguments": map[string]any{"python_code": "import time\ntime.sleep(0.5)\n6 * 7"}}).ok(t, "task-augmented call", &created)
	id := created.Task.TaskID
	if len(id) != 32 || created.Task.Status != "working" || created.Task.CreatedAt == "" || created.Task.TTL == nil || created.Task.PollInterval == nil {
		t.Fatalf("CreateTaskResult %+v: want a 32-hex id, working, createdAt, ttl, pollInterval", created.Task)
	}
	if *created.Task.TTL < 60000 || *created.Task.TTL > 61000 {
		t.Errorf("ttl %v, want the 60000 ms asked for (from creation, while the call runs)", *created.Task.TTL)
	}
	var res struct {
		StructuredContent struct {
			ReturnValue json.RawMessage `json:"return_value"`
		} `json:"structuredContent"`
		Meta map[string]struct {
			TaskID string `json:"taskId"`
		} `json:"_meta"`
	}
	c.call("tasks/result", map[string]any{"taskId": id}).ok(t, "tasks/result", &res)
	if string(res.StructuredContent.ReturnValue) != "42" || res.Meta["io.modelcontextprotocol/related-task"].TaskID != id {
		t.Errorf("tasks/result: value %s, related task %+v; want 42 and %s", res.StructuredContent.ReturnValue, res.Meta, id)
	}
	var got taskState
	c.call("tasks/get", map[string]any{"taskId": id}).ok(t, "tasks/get", &got)
	if got.Status != "completed" {
		t.Errorf("tasks/get after the result: %q, want completed", got.Status)
	}
	var list struct {
		Tasks []taskState `json:"tasks"`
	}
	c.call("tasks/list", map[string]any{}).ok(t, "tasks/list", &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != id {
		t.Errorf("tasks/list: %+v, want the one task", list)
	}
	if a := c.call("tasks/cancel", map[string]any{"taskId": id}); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("tasks/cancel of a completed task: %+v, want -32602", a)
	}
	if a := c.call("tasks/get", map[string]any{"taskId": "nosuchtask"}); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("tasks/get of an unknown task: %+v, want -32602", a)
	}

	// A task cancelled while it runs stays cancelled; its call stops.
	c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{},
		"arguments": map[string]any{"python_code": "import time\ntime.sleep(60)"}}).ok(t, "long task", &created)
	began := time.Now()
	c.call("tasks/cancel", map[string]any{"taskId": created.Task.TaskID}).ok(t, "tasks/cancel", &got)
	if got.Status != "cancelled" {
		t.Errorf("tasks/cancel: %q, want cancelled", got.Status)
	}
	if a := c.call("tasks/result", map[string]any{"taskId": created.Task.TaskID}); a.Error == nil {
		t.Errorf("tasks/result of a cancelled task: %s, want an error", a.Result)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("the cancelled call took %v to stop", d)
	}
	// The worker is free again for the next call.
	var plain struct {
		StructuredContent struct {
			ReturnValue json.RawMessage `json:"return_value"`
		} `json:"structuredContent"`
	}
	c.call("tools/call", map[string]any{"name": "run_python_code", "arguments": map[string]any{"python_code": "1 + 1"}}).ok(t, "plain call", &plain)
	if string(plain.StructuredContent.ReturnValue) != "2" {
		t.Errorf("a call without a task: %s", plain.StructuredContent.ReturnValue)
	}
}

// Past client_max_tasks, a task-augmented call is refused, saying why;
// once the task's result has been kept task_ttl, it is gone, and its place
// free again.
func TestTasksBoundPerClient(t *testing.T) {
	c := startRaw(t, "--workers", "1", "--attach", "never", "--client-max-tasks", "1", "--task-ttl", "2s")
	var init map[string]any
	c.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}}).ok(t, "initialize", &init)
	c.notify("notifications/initialized")
	var created struct {
		Task taskState `json:"task"`
	}
	c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{},
		"arguments": map[string]any{"python_code": "1"}}).ok(t, "first task", &created)
	a := c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{},
		"arguments": map[string]any{"python_code": "2"}})
	if a.Error == nil || !strings.Contains(a.Error.Message, "client_max_tasks") {
		t.Errorf("a second task past client_max_tasks 1: %+v, want an error naming client_max_tasks", a)
	}
	var res map[string]any
	c.call("tasks/result", map[string]any{"taskId": created.Task.TaskID}).ok(t, "tasks/result", &res)
	ended := time.Now()
	for {
		a := c.call("tasks/get", map[string]any{"taskId": created.Task.TaskID})
		if a.Error != nil {
			if a.Error.Code != -32602 || !strings.Contains(a.Error.Message, "task_ttl") {
				t.Errorf("an expired task: %+v, want -32602 naming task_ttl", a.Error)
			}
			if d := time.Since(ended); d < 2*time.Second {
				t.Errorf("the result was gone %v after the task ended, before its task_ttl of 2s", d)
			}
			break
		}
		if time.Since(ended) > 30*time.Second {
			t.Fatal("the task was still there 30s after it ended, with task_ttl 2s")
		}
		time.Sleep(200 * time.Millisecond) // polling, as a client does
	}
	c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{},
		"arguments": map[string]any{"python_code": "3"}}).ok(t, "a task after the first expired", &created)
}

// 2026-07-28: a client that declares the extension gets a quick call's
// result as it is, and a task for a call still running after task_after;
// tasks/get gives the result inline once it is complete.
func TestTasks20260728(t *testing.T) {
	c := startRaw(t, "--workers", "1", "--attach", "never", "--task-after", "2s")
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "t", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}
	var disc struct {
		Capabilities struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"capabilities"`
	}
	c.call("server/discover", map[string]any{"_meta": meta}).ok(t, "server/discover", &disc)
	if _, ok := disc.Capabilities.Extensions["io.modelcontextprotocol/tasks"]; !ok {
		t.Errorf("server/discover does not advertise the tasks extension: %+v", disc)
	}
	// A call without the extension first: the worker is up after it.
	var warm taskState
	c.call("tools/call", map[string]any{"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo": meta["io.modelcontextprotocol/clientInfo"], "io.modelcontextprotocol/clientCapabilities": map[string]any{}},
		"name": "run_python_code", "arguments": map[string]any{"python_code": "0"}}).ok(t, "a call without tasks", &warm)
	if warm.TaskID != "" {
		t.Errorf("a task for a client that did not declare the extension: %+v", warm)
	}
	var quick taskState
	c.call("tools/call", map[string]any{"_meta": meta, "name": "run_python_code",
		"arguments": map[string]any{"python_code": "1 + 1"}}).ok(t, "quick call", &quick)
	if quick.ResultType != "complete" || quick.TaskID != "" {
		t.Errorf("a quick call: %+v, want its result (resultType complete), no task", quick)
	}
	var task taskState
	c.call("tools/call", map[string]any{"_meta": meta, "name": "run_python_code",
		"arguments": map[string]any{"python_code": "import time\ntime.sleep(2)\n6 * 7"}}).ok(t, "slow call", &task)
	if task.ResultType != "task" || task.Status != "working" || task.TTLMs == nil {
		t.Fatalf("a slow call: %+v, want a task (resultType task, working, ttlMs)", task)
	}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	for {
		var got taskState
		c.call("tasks/get", map[string]any{"_meta": meta, "taskId": task.TaskID}).ok(t, "tasks/get", &got)
		if got.ResultType != "complete" {
			t.Errorf("tasks/get: resultType %q, want complete", got.ResultType)
		}
		if got.Status == "completed" {
			var res struct {
				StructuredContent struct {
					ReturnValue json.RawMessage `json:"return_value"`
				} `json:"structuredContent"`
			}
			if err := json.Unmarshal(got.Result, &res); err != nil || string(res.StructuredContent.ReturnValue) != "42" {
				t.Errorf("the completed task's result: %s (%v), want 42", got.Result, err)
			}
			break
		}
		if got.Status != "working" {
			t.Fatalf("tasks/get: %+v", got)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the task did not complete")
		case <-time.After(100 * time.Millisecond): // the poll interval a client keeps
		}
	}
	var ack map[string]any
	c.call("tasks/cancel", map[string]any{"_meta": meta, "taskId": task.TaskID}).ok(t, "tasks/cancel", &ack)
	if ack["resultType"] != "complete" {
		t.Errorf("tasks/cancel: %v, want an empty acknowledgement", ack)
	}
}

// The TypeScript SDK 1.32.2's tasks client (client.experimental.tasks,
// 2025-11-25) against pyrun stdio: it sees the capability and the tool's
// taskSupport, creates a task, polls it and gets the result.
func TestTasksTypeScriptClient(t *testing.T) {
	needBinary(t)
	var rep struct {
		ServerTasks map[string]any `json:"serverTasks"`
		TaskSupport string         `json:"taskSupport"`
		Messages    []struct {
			Type   string          `json:"type"`
			Status string          `json:"status"`
			TaskID string          `json:"taskId"`
			Value  json.RawMessage `json:"value"`
			Error  string          `json:"error"`
		} `json:"messages"`
	}
	runTSScript(t, &rep, "tasks.mjs", pyrunBin, "stdio", "--workers", "1", "--attach", "never", "--log-level", "warn")
	if rep.ServerTasks == nil || rep.TaskSupport != "optional" {
		t.Errorf("the client saw tasks capability %v and taskSupport %q", rep.ServerTasks, rep.TaskSupport)
	}
	var types []string
	for _, m := range rep.Messages {
		types = append(types, m.Type)
	}
	if len(rep.Messages) < 3 || rep.Messages[0].Type != "taskCreated" || rep.Messages[0].TaskID == "" {
		t.Fatalf("messages %v, want taskCreated, taskStatus..., result: %+v", types, rep.Messages)
	}
	last := rep.Messages[len(rep.Messages)-1]
	if last.Type != "result" || string(last.Value) != "42" {
		t.Errorf("the stream ended with %+v, want the result 42 (messages %v)", last, types)
	}
}

// The 2026-07-28 tasks extension over HTTP (/mcp): advertised in
// server/discover, a slow call becomes a task, and a task belongs to the
// client of the credentials that made it: another client does not find it.
func TestTasksHTTP20260728(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice:alice-token-0123456789abcdef\nbob:bob-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--workers", "1", "--auth-token-file", tokens)
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "t", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}
	post := func(token, method string, params map[string]any) rawAnswer {
		t.Helper()
		params["_meta"] = meta
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+"/mcp", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Authorization", "Bearer "+token)
		// SEP-2243's routing headers; a task's calls are routed by its id.
		req.Header.Set("Mcp-Method", method)
		if name, ok := params["name"].(string); ok {
			req.Header.Set("Mcp-Name", name)
		} else if id, ok := params["taskId"].(string); ok {
			req.Header.Set("Mcp-Name", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, body)
		}
		// JSON, or an event stream whose data line is the answer.
		if i := bytes.Index(body, []byte("data: ")); i >= 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			body = body[i+6:]
			if j := bytes.IndexByte(body, '\n'); j >= 0 {
				body = body[:j]
			}
		}
		var a rawAnswer
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("%s: %v in %s", method, err, body)
		}
		return a
	}
	const alice, bob = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
	var disc struct {
		Capabilities struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"capabilities"`
	}
	post(alice, "server/discover", map[string]any{}).ok(t, "server/discover", &disc)
	if _, ok := disc.Capabilities.Extensions["io.modelcontextprotocol/tasks"]; !ok {
		t.Errorf("server/discover over HTTP does not advertise the tasks extension: %+v", disc)
	}
	var task taskState
	post(alice, "tools/call", map[string]any{"name": "run_python_code",
		"arguments": map[string]any{"python_code": "import time\ntime.sleep(2)\n6 * 7"}}).ok(t, "slow call", &task)
	if task.ResultType != "task" || task.TaskID == "" {
		t.Fatalf("a slow call over HTTP: %+v, want a task", task)
	}
	if a := post(bob, "tasks/get", map[string]any{"taskId": task.TaskID}); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("another client's tasks/get: %+v, want -32602 (not found)", a)
	}
	deadline := time.Now().Add(callTimeout)
	for {
		var got taskState
		post(alice, "tasks/get", map[string]any{"taskId": task.TaskID}).ok(t, "tasks/get", &got)
		if got.Status == "completed" {
			if !strings.Contains(string(got.Result), `"return_value":42`) {
				t.Errorf("the task's result: %s, want return_value 42", got.Result)
			}
			break
		}
		if got.Status != "working" || time.Now().After(deadline) {
			t.Fatalf("tasks/get: %+v", got)
		}
		time.Sleep(250 * time.Millisecond) // the poll interval pyrun suggests
	}
	// A call without the extension is answered as before.
	meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{}
	var plain taskState
	post(alice, "tools/call", map[string]any{"name": "run_python_code",
		"arguments": map[string]any{"python_code": "import time\ntime.sleep(1.5)\n1"}}).ok(t, "a call without tasks", &plain)
	if plain.TaskID != "" {
		t.Errorf("a task for a client that did not declare the extension: %+v", plain)
	}
}

// Kept results are bounded per client in bytes: past --client-task-bytes
// the oldest is dropped, and fetching it says so, naming the setting.
func TestTaskResultsBoundInBytes(t *testing.T) {
	c := startRaw(t, "--workers", "1", "--attach", "never", "--client-task-bytes", "200KiB")
	var init map[string]any
	c.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}}).ok(t, "initialize", &init)
	c.notify("notifications/initialized")
	var ids []string
	for i := range 2 {
		var created struct {
			Task taskState `json:"task"`
		}
		c.call("tools/call", map[string]any{"name": "run_python_code", "task": map[string]any{},
			"arguments": map[string]any{"python_code": fmt.Sprintf("print('%d' * 40_000)", i)}}).ok(t, "a task", &created)
		ids = append(ids, created.Task.TaskID)
		// Each ends before the next starts: the first is the oldest kept.
		var done map[string]any
		c.call("tasks/get", map[string]any{"taskId": created.Task.TaskID}).ok(t, "tasks/get", &done)
		for deadline := time.Now().Add(callTimeout); done["status"] == "working" && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			c.call("tasks/get", map[string]any{"taskId": created.Task.TaskID}).ok(t, "tasks/get", &done)
		}
	}
	a := c.call("tasks/result", map[string]any{"taskId": ids[0]})
	if a.Error == nil || !strings.Contains(a.Error.Message, "client_task_bytes") {
		t.Errorf("the oldest of two results of ~118 KiB (output in text and structuredContent) past a 200 KiB bound: %+v, want an error naming client_task_bytes", a)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	c.call("tasks/result", map[string]any{"taskId": ids[1]}).ok(t, "the newest result", &res)
	if len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, strings.Repeat("1", 40_000)) {
		t.Errorf("the newest result lost its output: %.200v", res)
	}
}

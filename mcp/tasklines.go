package mcp

// Tasks on the lines of stdio and the local socket (see tasks.go): the
// reader hands tasks' requests here before the SDK sees them, and the
// writer lets this add what advertises 2025-11-25's tasks to the SDK's
// answers. taskCall serves a task request from any transport (HTTP's is
// taskhttp.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// lineTasks is one session's (one connection's) side of tasks.
type lineTasks struct {
	s   *Server
	out *stdioWriter
	ctx context.Context // the session's: its flow.Stream, for live output

	ready   chan struct{} // closed once ss is set
	ss      *sdk.ServerSession
	setOnce sync.Once

	mu       sync.Mutex
	revision string            // negotiated by initialize
	rewrite  map[string]string // request ids (raw JSON) whose answers get tasks added: the method
}

func newLineTasks(s *Server, out *stdioWriter, ctx context.Context) *lineTasks {
	return &lineTasks{s: s, out: out, ctx: ctx, ready: make(chan struct{}), rewrite: map[string]string{}}
}

// setSession gives the tasks the SDK session their calls' live output
// goes to.
func (lt *lineTasks) setSession(ss *sdk.ServerSession) {
	lt.setOnce.Do(func() {
		lt.ss = ss
		close(lt.ready)
	})
}

// session waits for the SDK session (its first line is being read while
// it connects).
func (lt *lineTasks) session() *sdk.ServerSession {
	select {
	case <-lt.ready:
		return lt.ss
	case <-lt.ctx.Done():
		return nil
	}
}

// request is the part of a request line tasks look at.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		TaskID    string          `json:"taskId"`
		Cursor    *string         `json:"cursor"`
		Task      *struct {
			TTL *float64 `json:"ttl"`
		} `json:"task"`
		Meta map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// revisionOf is the revision a request speaks: its own (2026-07-28 puts it
// in _meta), else its session's.
func (lt *lineTasks) revisionOf(r *request) string {
	if v, ok := r.Params.Meta[protocolVersionMeta]; ok {
		var rev string
		if json.Unmarshal(v, &rev) == nil {
			return rev
		}
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.revision
}

// takesTasks says whether a 2026-07-28 request declares the extension.
func takesTasks(r *request) bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(r.Params.Meta[clientCapabilityMeta], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[tasksExtension]
	return ok
}

// intercept handles line (one JSON-RPC message, not a batch) when it is
// tasks' business, and says whether it did; otherwise the SDK gets it.
func (lt *lineTasks) intercept(line []byte) bool {
	if len(line) == 0 || line[0] != '{' {
		return false
	}
	// Most lines are none of tasks' business: a look for the words that
	// would make them so spares decoding them a second time.
	if !bytes.Contains(line, []byte("task")) && !bytes.Contains(line, []byte(`"initialize"`)) &&
		!bytes.Contains(line, []byte(`"tools/list"`)) {
		return false
	}
	var r request
	if json.Unmarshal(line, &r) != nil || len(r.ID) == 0 || string(r.ID) == "null" {
		return false // notifications and answers are the SDK's
	}
	switch r.Method {
	case "initialize":
		lt.track(r.ID, r.Method)
		return false
	case "tools/list":
		lt.track(r.ID, r.Method)
		return false
	}
	rev := lt.revisionOf(&r)
	kind, ttl := lt.s.taskKind(&r, rev)
	if kind == "" {
		return false
	}
	id := r.ID
	go func() {
		ss := lt.session()
		if ss == nil {
			return
		}
		tc := taskCall{s: lt.s, client: Anonymous, ss: ss, ctx: lt.ctx}
		res, rerr := tc.serve(kind, &r, rev, ttl)
		if res != nil || rerr != nil {
			lt.answer(id, res, rerr)
		}
	}()
	return true
}

// taskKind says whether r, of revision rev, is tasks' business: "call" for
// a run tool's call to make a task of (ttl: the one asked for, 2025-11-25),
// "task" for a task method; "" for the SDK's.
func (s *Server) taskKind(r *request, rev string) (kind string, ttl time.Duration) {
	switch {
	case rev == "2025-11-25":
		switch r.Method {
		case "tools/call":
			if r.Params.Task == nil || s.tools[r.Params.Name] == nil {
				return "", 0
			}
			if r.Params.Task.TTL != nil && *r.Params.Task.TTL > 0 {
				ttl = time.Duration(*r.Params.Task.TTL * float64(time.Millisecond))
			}
			return "call", ttl
		case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
			return "task", 0
		}
	case rev >= revision20260728:
		switch r.Method {
		case "tools/call":
			if takesTasks(r) && s.tools[r.Params.Name] != nil {
				return "call", 0
			}
		case "tasks/get", "tasks/cancel", "tasks/update":
			return "task", 0
		}
	}
	return "", 0
}

// taskCall is where a task request came from.
type taskCall struct {
	s      *Server
	client string             // whose tasks it sees
	ss     *sdk.ServerSession // the session live output goes to; nil over HTTP
	extra  *sdk.RequestExtra  // the request's credentials, over HTTP
	ctx    context.Context    // ends the waits when the requester is gone
}

// serve answers r, of kind (taskKind), as long as that takes: a
// 2026-07-28 call up to task_after, tasks/result until its task ends. A nil
// result and error: the requester is gone, nothing to answer.
func (tc taskCall) serve(kind string, r *request, rev string, ttl time.Duration) (any, *jsonrpc.Error) {
	if kind == "call" {
		after := time.Duration(0)
		if rev >= revision20260728 {
			after = tc.s.taskOptions().After
		}
		return tc.call(r, rev, ttl, after)
	}
	return tc.task(r, rev)
}

func (lt *lineTasks) track(id json.RawMessage, method string) {
	lt.mu.Lock()
	lt.rewrite[normID(id)] = method
	lt.mu.Unlock()
}

// normID is an id's JSON as the SDK writes it back.
func normID(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(id.Raw())
	return string(b)
}

// call runs r's call as a task. Within after (2026-07-28), a call that
// ends is answered with its result, as without tasks.
func (tc taskCall) call(r *request, rev string, ttl, after time.Duration) (any, *jsonrpc.Error) {
	params := &sdk.CallToolParamsRaw{Name: r.Params.Name, Arguments: r.Params.Arguments}
	if len(r.Params.Meta) > 0 {
		params.Meta = sdk.Meta{}
		for k, v := range r.Params.Meta {
			var x any
			if json.Unmarshal(v, &x) == nil {
				params.Meta[k] = x
			}
		}
	}
	req := &sdk.CallToolRequest{Session: tc.ss, Params: params, Extra: tc.extra}
	run := func(ctx context.Context) *sdk.CallToolResult {
		res, err := tc.s.runCall(ctx, req)
		if err != nil {
			return toolError(err)
		}
		return res
	}
	ts := tc.s.tasks
	t, err := ts.start(tc.client, ttl, after > 0, run)
	if err != nil {
		if rev >= revision20260728 {
			// The extension lets pyrun answer without a task: the call
			// runs as any other.
			return withResultType(run(tc.ctx)), nil
		}
		return nil, rpcError(jsonrpc.CodeInvalidRequest, "%v", err)
	}
	if after > 0 {
		select {
		case <-t.done:
			ts.mu.Lock()
			res := t.result
			ts.mu.Unlock()
			// Done in time: the result, and no task to fetch.
			ts.forget(t)
			return withResultType(res), nil
		case <-time.After(after):
			ts.settle(t)
		case <-tc.ctx.Done():
			ts.settle(t)
			return nil, nil // the task goes on; its requester is gone
		}
	}
	snap := ts.snapshot(t, rev)
	if rev >= revision20260728 {
		snap["resultType"] = "task"
		return snap, nil
	}
	return map[string]any{"task": snap}, nil
}

// withResultType is a result as 2026-07-28 writes a complete one.
func withResultType(res *sdk.CallToolResult) map[string]any {
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["resultType"] = "complete"
	return m
}

// task answers tasks/get, tasks/result, tasks/cancel, tasks/list and
// tasks/update.
func (tc taskCall) task(r *request, rev string) (any, *jsonrpc.Error) {
	ts := tc.s.tasks
	new := rev >= revision20260728
	if r.Method == "tasks/list" {
		if r.Params.Cursor != nil && *r.Params.Cursor != "" {
			return nil, rpcError(jsonrpc.CodeInvalidParams, "invalid cursor: pyrun lists every task in one page")
		}
		tasks := []map[string]any{}
		for _, t := range ts.list(tc.client) {
			tasks = append(tasks, ts.snapshot(t, rev))
		}
		return map[string]any{"tasks": tasks}, nil
	}
	t := ts.get(tc.client, r.Params.TaskID)
	if t == nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, "task %q not found: it never was, or its result was kept its time (task_ttl) and is gone", r.Params.TaskID)
	}
	switch r.Method {
	case "tasks/get":
		snap := ts.snapshot(t, rev)
		if new {
			snap["resultType"] = "complete"
		}
		return snap, nil
	case "tasks/update":
		// pyrun's calls never wait for input: nothing to update.
		return map[string]any{"resultType": "complete"}, nil
	case "tasks/cancel":
		cancelled := ts.cancelTask(t)
		if new {
			return map[string]any{"resultType": "complete"}, nil
		}
		if !cancelled {
			return nil, rpcError(jsonrpc.CodeInvalidParams, "cannot cancel task %s: it has ended (%s)", t.id, ts.snapshot(t, rev)["status"])
		}
		return ts.snapshot(t, rev), nil
	case "tasks/result":
		select {
		case <-t.done:
		case <-tc.ctx.Done():
			return nil, nil
		}
		ts.mu.Lock()
		res, status, dropped, message := t.result, t.status, t.dropped, t.message
		ts.mu.Unlock()
		if status == taskCancelled {
			return nil, rpcError(jsonrpc.CodeInternalError, "task %s was cancelled", t.id)
		}
		if dropped {
			return nil, rpcError(jsonrpc.CodeInternalError, "task %s ended, but %s", t.id, message)
		}
		m := withResultType(res)
		delete(m, "resultType") // 2025-11-25 has none
		meta, _ := m["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[relatedTaskMeta] = map[string]any{"taskId": t.id}
		m["_meta"] = meta
		return m, nil
	}
	return nil, rpcError(jsonrpc.CodeMethodNotFound, "%q is not a task method", r.Method)
}

// answer writes a response to id.
func (lt *lineTasks) answer(id json.RawMessage, result any, rerr *jsonrpc.Error) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		msg["error"] = rerr
	} else {
		msg["result"] = result
	}
	b, err := json.Marshal(msg)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcError(jsonrpc.CodeInternalError, "%v", err)})
	}
	_, _ = lt.out.Write(append(b, '\n'))
}

// rewriteAnswer adds 2025-11-25's tasks to the SDK's answer b to
// initialize or tools/list, when b is one; else it returns b as it is.
func (lt *lineTasks) rewriteAnswer(b []byte) []byte {
	lt.mu.Lock()
	if len(lt.rewrite) == 0 {
		lt.mu.Unlock()
		return b
	}
	lt.mu.Unlock()
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m["id"] == nil || m["method"] != nil {
		return b
	}
	key := normID(m["id"])
	lt.mu.Lock()
	method, ok := lt.rewrite[key]
	delete(lt.rewrite, key) // answered, with a result or an error
	rev := lt.revision
	lt.mu.Unlock()
	if !ok || m["result"] == nil {
		return b
	}
	var res map[string]any
	if json.Unmarshal(m["result"], &res) != nil {
		return b
	}
	switch method {
	case "initialize":
		v, _ := res["protocolVersion"].(string)
		lt.mu.Lock()
		lt.revision = v
		lt.mu.Unlock()
		if v != "2025-11-25" {
			return b
		}
		caps, _ := res["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
			"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
		res["capabilities"] = caps
	case "tools/list":
		if rev != "2025-11-25" {
			return b
		}
		tools, _ := res["tools"].([]any)
		for _, x := range tools {
			if tool, ok := x.(map[string]any); ok && lt.s.tools[toString(tool["name"])] != nil {
				tool["execution"] = map[string]any{"taskSupport": "optional"}
			}
		}
	}
	out, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m["id"], "result": res})
	if err != nil {
		return b
	}
	if len(b) > 0 && b[len(b)-1] == '\n' {
		out = append(out, '\n')
	}
	return out
}

func toString(v any) string { s, _ := v.(string); return s }

// forget drops a task whose result went out as the call's own answer.
func (ts *taskStore) forget(t *task) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.byID[t.id]; ok {
		ts.removeLocked(t.id, t)
	}
}

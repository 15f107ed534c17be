package mcp

// Tasks on the lines of stdio and the local socket (see tasks.go): the
// reader hands tasks' requests here before the SDK sees them, and the
// writer lets this add what advertises tasks to the SDK's answers.

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
	ctx context.Context // the session's: its outStream, for live output

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
		!bytes.Contains(line, []byte(`"server/discover"`)) && !bytes.Contains(line, []byte(`"tools/list"`)) {
		return false
	}
	var r request
	if json.Unmarshal(line, &r) != nil || len(r.ID) == 0 || string(r.ID) == "null" {
		return false // notifications and answers are the SDK's
	}
	switch r.Method {
	case "initialize", "server/discover":
		lt.track(r.ID, r.Method)
		return false
	case "tools/list":
		lt.track(r.ID, r.Method)
		return false
	}
	rev := lt.revisionOf(&r)
	switch {
	case rev == "2025-11-25":
		switch r.Method {
		case "tools/call":
			if r.Params.Task == nil || lt.s.tools[r.Params.Name] == nil {
				return false
			}
			var ttl time.Duration
			if r.Params.Task.TTL != nil && *r.Params.Task.TTL > 0 {
				ttl = time.Duration(*r.Params.Task.TTL * float64(time.Millisecond))
			}
			lt.startTask(&r, rev, ttl, 0)
		case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
			go lt.answerTask(&r, rev)
		default:
			return false
		}
		return true
	case rev >= revision20260728:
		switch r.Method {
		case "tools/call":
			if !takesTasks(&r) || lt.s.tools[r.Params.Name] == nil {
				return false
			}
			lt.startTask(&r, rev, 0, lt.s.taskOptions().After)
		case "tasks/get", "tasks/cancel", "tasks/update":
			go lt.answerTask(&r, rev)
		default:
			return false
		}
		return true
	}
	return false
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

// startTask runs r's call as a task. Within after (2026-07-28), a call
// that ends is answered with its result, as without tasks.
func (lt *lineTasks) startTask(r *request, rev string, ttl, after time.Duration) {
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
	id := r.ID
	go func() {
		ss := lt.session()
		if ss == nil {
			return
		}
		t, err := lt.s.tasks.start(Anonymous, ttl, func(ctx context.Context) *sdk.CallToolResult {
			ctx = context.WithValue(ctx, outStreamKey{}, lt.ctx.Value(outStreamKey{}))
			res, err := lt.s.runCall(ctx, &sdk.CallToolRequest{Session: ss, Params: params})
			if err != nil {
				return toolError(err)
			}
			return res
		})
		if err != nil {
			if rev >= revision20260728 {
				// The extension lets pyrun answer without a task: it runs
				// the call as any other.
				res, err := lt.s.runCall(lt.ctx, &sdk.CallToolRequest{Session: ss, Params: params})
				if err != nil {
					res = toolError(err)
				}
				lt.answer(id, withResultType(res), nil)
				return
			}
			lt.answer(id, nil, rpcError(jsonrpc.CodeInvalidRequest, "%v", err))
			return
		}
		if after > 0 {
			select {
			case <-t.done:
				lt.s.tasks.mu.Lock()
				res := t.result
				lt.s.tasks.mu.Unlock()
				// Done in time: the result, and no task to fetch.
				lt.s.tasks.forget(t)
				lt.answer(id, withResultType(res), nil)
				return
			case <-time.After(after):
			case <-lt.ctx.Done():
				return
			}
		}
		snap := lt.s.tasks.snapshot(t, rev)
		var result any
		if rev >= revision20260728 {
			snap["resultType"] = "task"
			result = snap
		} else {
			result = map[string]any{"task": snap}
		}
		lt.answer(id, result, nil)
	}()
}

// withResultType is a result as 2026-07-28 writes a complete one.
func withResultType(res *sdk.CallToolResult) map[string]any {
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["resultType"] = "complete"
	return m
}

// answerTask answers tasks/get, tasks/result, tasks/cancel, tasks/list and
// tasks/update.
func (lt *lineTasks) answerTask(r *request, rev string) {
	ts := lt.s.tasks
	new := rev >= revision20260728
	if r.Method == "tasks/list" {
		if r.Params.Cursor != nil && *r.Params.Cursor != "" {
			lt.answer(r.ID, nil, rpcError(jsonrpc.CodeInvalidParams, "invalid cursor: pyrun lists every task in one page"))
			return
		}
		tasks := []map[string]any{}
		for _, t := range ts.list(Anonymous) {
			tasks = append(tasks, ts.snapshot(t, rev))
		}
		lt.answer(r.ID, map[string]any{"tasks": tasks}, nil)
		return
	}
	t := ts.get(Anonymous, r.Params.TaskID)
	if t == nil {
		lt.answer(r.ID, nil, rpcError(jsonrpc.CodeInvalidParams, "task %q not found: it never was, or its result was kept its time (task_ttl) and is gone", r.Params.TaskID))
		return
	}
	switch r.Method {
	case "tasks/get":
		snap := ts.snapshot(t, rev)
		if new {
			snap["resultType"] = "complete"
		}
		lt.answer(r.ID, snap, nil)
	case "tasks/update":
		// pyrun's calls never wait for input: nothing to update.
		lt.answer(r.ID, map[string]any{"resultType": "complete"}, nil)
	case "tasks/cancel":
		cancelled := ts.cancelTask(t)
		if new {
			lt.answer(r.ID, map[string]any{"resultType": "complete"}, nil)
			return
		}
		if !cancelled {
			lt.answer(r.ID, nil, rpcError(jsonrpc.CodeInvalidParams, "cannot cancel task %s: it has ended (%s)", t.id, ts.snapshot(t, rev)["status"]))
			return
		}
		lt.answer(r.ID, ts.snapshot(t, rev), nil)
	case "tasks/result":
		select {
		case <-t.done:
		case <-lt.ctx.Done():
			return
		}
		ts.mu.Lock()
		res, status := t.result, t.status
		ts.mu.Unlock()
		if status == taskCancelled {
			lt.answer(r.ID, nil, rpcError(jsonrpc.CodeInternalError, "task %s was cancelled", t.id))
			return
		}
		m := withResultType(res)
		delete(m, "resultType") // 2025-11-25 has none
		meta, _ := m["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[relatedTaskMeta] = map[string]any{"taskId": t.id}
		m["_meta"] = meta
		lt.answer(r.ID, m, nil)
	}
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

// rewriteAnswer adds tasks to the SDK's answer b to initialize,
// server/discover or tools/list, when b is one; else it returns b as it is.
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
	case "server/discover":
		caps, _ := res["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		ext, _ := caps["extensions"].(map[string]any)
		if ext == nil {
			ext = map[string]any{}
		}
		ext[tasksExtension] = map[string]any{}
		caps["extensions"] = ext
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
		delete(ts.byID, t.id)
		if ts.counts[t.client]--; ts.counts[t.client] <= 0 {
			delete(ts.counts, t.client)
		}
	}
}

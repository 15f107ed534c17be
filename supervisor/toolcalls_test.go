package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// callerFunc makes a ToolCaller of a function.
type callerFunc func(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error)

func (f callerFunc) Call(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error) {
	return f(ctx, server, tool, args)
}

// echo answers every call with its server, tool and arguments as text.
var echo = callerFunc(func(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error) {
	text, _ := json.Marshal(server + "." + tool + " " + string(args))
	return json.RawMessage(`{"content":[{"type":"text","text":` + string(text) + `}]}`), nil
})

const catalog = `{"servers":[{"name":"s","tools":[{"name":"t","inputSchema":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}]}]}`

// TestToolCalls runs host calls through a real worker: concurrent ones,
// failures, a call that outlives its run (the worker stays in step and
// takes the next call), and a job without tools.
func TestToolCalls(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1})

	res := run(t, p, supervisor.Job{Tools: echo, Catalog: json.RawMessage(catalog), Code: `import asyncio, mcp_tools
await asyncio.gather(*(mcp_tools.s.t(x=i) for i in range(3)))`})
	if res.Status != supervisor.StatusSuccess || !strings.Contains(res.Value, `"s.t {\"x\": 2}"`) {
		t.Fatalf("gather: %+v", res)
	}
	first := res.Worker

	failing := callerFunc(func(context.Context, string, string, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("no such luck")
	})
	res = run(t, p, supervisor.Job{Tools: failing, Catalog: json.RawMessage(catalog), Code: `import mcp_tools
try:
    await mcp_tools.s.t(x=1)
except mcp_tools.ToolError as e:
    r = str(e)
r`})
	if res.Value != `"no such luck"` {
		t.Errorf("a failing call: %+v", res)
	}

	// A call still running when its run times out is cancelled, and its
	// answer reaches the worker before the next call does.
	var cancelled atomic.Bool
	blocking := callerFunc(func(ctx context.Context, _, _ string, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		cancelled.Store(true)
		return nil, ctx.Err()
	})
	began := time.Now()
	res = run(t, p, supervisor.Job{Tools: blocking, Catalog: json.RawMessage(catalog), Timeout: time.Second,
		Code: "import mcp_tools\nawait mcp_tools.s.t(x=1)"})
	if res.Status != supervisor.StatusTimeout || !cancelled.Load() {
		t.Errorf("a run stuck in a tool call: %+v (call cancelled: %v)", res, cancelled.Load())
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("the stuck run took %s with a limit of 1s", d)
	}
	res = run(t, p, supervisor.Job{Tools: echo, Catalog: json.RawMessage(catalog), Code: "import mcp_tools\nawait mcp_tools.s.t(x=5)"})
	if res.Status != supervisor.StatusSuccess || res.Value != `"s.t {\"x\": 5}"` || res.Worker != first {
		t.Errorf("the next run on the same worker: %+v (first worker %s)", res, first)
	}

	// A worker asking for more calls at once than the supervisor runs gets
	// the rest refused at once, and stays in step.
	res = run(t, p, supervisor.Job{Tools: blocking, Catalog: json.RawMessage(catalog), Code: `import asyncio, mcp_tools
async def one(i):
    try:
        await mcp_tools.s.t(x=i)
    except mcp_tools.ToolError as e:
        return str(e)
tasks = [asyncio.ensure_future(one(i)) for i in range(200)]
done, _ = await asyncio.wait(tasks, timeout=1)
print(len(done), sorted(set(t.result() for t in done)))`})
	if res.Status != supervisor.StatusSuccess || res.Stdout != "136 ['pyrun: more than 64 tool calls at once']\n" {
		t.Errorf("a flood of calls: %+v", res)
	}
	res = run(t, p, supervisor.Job{Tools: echo, Catalog: json.RawMessage(catalog), Code: "import mcp_tools\nawait mcp_tools.s.t(x=6)"})
	if res.Value != `"s.t {\"x\": 6}"` || res.Worker != first {
		t.Errorf("after a flood of calls: %+v", res)
	}

	// Without tools, a call (made by hand) is refused, and mcp_tools is empty.
	res = run(t, p, supervisor.Job{Code: `import mcp_tools
try:
    await mcp_tools.call("s", "t", x=1)
except mcp_tools.ToolError as e:
    r = [str(e), [n for n in dir(mcp_tools) if not n.startswith("_")]]
r`})
	if !strings.Contains(res.Value, "this call has no tools") || strings.Contains(res.Value, `"s"`) {
		t.Errorf("a job without tools: %+v", res)
	}
}

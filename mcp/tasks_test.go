package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// textResult is a call's result of about n bytes of JSON.
func textResult(n int) func(context.Context) *sdk.CallToolResult {
	return func(context.Context) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", n)}}}
	}
}

// startEnded starts a task of client and waits for its call to end.
func startEnded(t *testing.T, ts *taskStore, client string, n int) *task {
	t.Helper()
	tk, err := ts.start(client, 0, false, textResult(n))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tk.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the task's call did not end")
	}
	return tk
}

func keptBytes(ts *taskStore, client string) int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.kept[client]
}

// Kept results wait outside every other per-client bound: past
// client_task_bytes, the client's oldest kept result is dropped (and
// fetching it says why), its newer ones and other clients' stay.
func TestTaskResultsBoundPerClientInBytes(t *testing.T) {
	const limit = 100 << 10
	ts := newTaskStore(TaskOptions{ClientBytes: limit})
	first := startEnded(t, ts, "alice", 40<<10)
	bobs := startEnded(t, ts, "bob", 40<<10)
	second := startEnded(t, ts, "alice", 40<<10)
	if first.dropped || second.dropped {
		t.Fatalf("80 KiB kept of a 100 KiB bound: a result was dropped")
	}
	third := startEnded(t, ts, "alice", 40<<10)
	if got := keptBytes(ts, "alice"); got > limit {
		t.Errorf("alice keeps %d bytes of results, past client_task_bytes %d", got, limit)
	}
	if !first.dropped || second.dropped || third.dropped {
		t.Errorf("dropped: first %v second %v third %v, want only the oldest", first.dropped, second.dropped, third.dropped)
	}
	if bobs.dropped || keptBytes(ts, "bob") == 0 {
		t.Errorf("alice's results dropped bob's (dropped %v, bob keeps %d bytes)", bobs.dropped, keptBytes(ts, "bob"))
	}

	tc := taskCall{s: &Server{tasks: ts}, client: "alice", ctx: context.Background()}
	r := &request{Method: "tasks/result"}
	r.Params.TaskID = first.id
	if _, rerr := tc.task(r, "2025-11-25"); rerr == nil || !strings.Contains(rerr.Message, "client_task_bytes") {
		t.Errorf("tasks/result of a dropped result: %v, want an error naming client_task_bytes", rerr)
	}
	r.Params.TaskID = third.id
	if res, rerr := tc.task(r, "2025-11-25"); rerr != nil || res == nil {
		t.Errorf("tasks/result of a kept result: %v %v", res, rerr)
	}
	snap := ts.snapshot(first, revision20260728)
	if snap["status"] != taskFailed || !strings.Contains(toString(snap["statusMessage"]), "--client-task-bytes") {
		t.Errorf("2026-07-28 tasks/get of a dropped result: %v, want failed naming --client-task-bytes", snap)
	}

	// One result past the bound alone is not kept either.
	big := startEnded(t, ts, "carol", 2*limit)
	if !big.dropped || keptBytes(ts, "carol") != 0 {
		t.Errorf("a result of twice the bound: dropped %v, kept %d bytes", big.dropped, keptBytes(ts, "carol"))
	}

	// Forgotten tasks give their bytes back.
	ts.forget(third)
	ts.forget(second)
	if got := keptBytes(ts, "alice"); got != 0 {
		t.Errorf("alice keeps %d bytes after her tasks were forgotten", got)
	}
}

// A 2026-07-28 call answered with its result (within task_after) is not
// kept; one that becomes a task after all is, once its caller settles it.
func TestInlineTaskResultsKeptOnlyOnceSettled(t *testing.T) {
	ts := newTaskStore(TaskOptions{ClientBytes: 1 << 20})
	tk, err := ts.start("alice", 0, true, textResult(10<<10))
	if err != nil {
		t.Fatal(err)
	}
	<-tk.done
	if got := keptBytes(ts, "alice"); got != 0 {
		t.Fatalf("an inline call's result counted before its caller decided: %d bytes", got)
	}
	ts.settle(tk)
	if got := keptBytes(ts, "alice"); got < 10<<10 {
		t.Errorf("a settled task's result counts %d bytes, want its size", got)
	}
}

// Results kept their time are swept, and their bytes with them.
func TestSweptTaskResultsGiveTheirBytesBack(t *testing.T) {
	ts := newTaskStore(TaskOptions{ClientBytes: 1 << 20, TTL: time.Millisecond})
	startEnded(t, ts, "alice", 10<<10)
	time.Sleep(5 * time.Millisecond)
	ts.list("alice") // sweeps
	if got := keptBytes(ts, "alice"); got != 0 {
		t.Errorf("alice keeps %d bytes after her only task expired", got)
	}
}

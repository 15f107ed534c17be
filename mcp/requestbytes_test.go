package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/mcptest"
)

// bigArgs are arguments of about 3 MiB: a comment of 1 MiB, 1 MiB of
// globals and 1 MiB of files, within a --max-code of 1 MiB.
func bigArgs() map[string]any {
	n := 1<<20 - 64
	return map[string]any{
		"python_code":      "#" + strings.Repeat("a", n),
		"global_variables": map[string]any{"g": strings.Repeat("b", n)},
		"files":            map[string]any{"in.txt": strings.Repeat("c", n)},
	}
}

// startHTTP serves s over HTTP for the test.
func startHTTP(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s.HTTPHandler(HTTPOptions{}))
	t.Cleanup(ts.Close)
	return ts
}

func connectHTTP(t *testing.T, transport sdk.Transport) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Over Streamable HTTP, a client whose calls in flight hold its share of
// request bytes has its next call refused before the body is decoded: a
// JSON-RPC error with the call's own id (the client's CallTool returns it at
// once) that names client_max_request_bytes; the call never reaches the
// pool, and is counted. Once a call ends, the client's next call is taken.
func TestRequestBytesRefusedOverStreamableHTTP(t *testing.T) {
	g := mcptest.NewGate()
	s := New(g, Options{Requests: flow.RequestLimits{ClientMaxBytes: 8 << 20, MaxBytes: 64 << 20}}, testLogger(t))
	ts := startHTTP(t, s)
	cs := connectHTTP(t, &sdk.StreamableClientTransport{Endpoint: ts.URL + "/mcp", MaxRetries: -1})
	type outcome struct {
		res *sdk.CallToolResult
		err error
	}
	call := func() chan outcome {
		out := make(chan outcome, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: bigArgs()})
			out <- outcome{res, err}
		}()
		return out
	}
	first, second := call(), call()
	g.WaitStarted(t, Anonymous)
	g.WaitStarted(t, Anonymous)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolName, Arguments: bigArgs()})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || !strings.Contains(rpcErr.Message, "client_max_request_bytes") ||
		!strings.Contains(rpcErr.Message, "busy") {
		t.Fatalf("a third call of 3 MiB past the client's 8 MiB: %v; want a JSON-RPC error at once naming client_max_request_bytes", err)
	}
	g.NoneStarted(t)
	if n := refusedCount(t, s, "client_max_request_bytes"); n != 1 {
		t.Errorf("pyrun_requests_refused_total{limit=client_max_request_bytes} is %v, want 1", n)
	}
	if held := s.front.bytes.Held(); held < 6<<20 || held > 7<<20 {
		t.Errorf("%d bytes held for two calls of about 3 MiB", held)
	}
	// One call ends; the client's next call is taken.
	g.Release(Anonymous)
	var pending chan outcome
	select {
	case o := <-first:
		pending = second
		if o.err != nil {
			t.Error(o.err)
		}
	case o := <-second:
		pending = first
		if o.err != nil {
			t.Error(o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no call ended")
	}
	third := call()
	g.WaitStarted(t, Anonymous)
	g.Release(Anonymous)
	g.Release(Anonymous)
	for _, ch := range []chan outcome{pending, third} {
		select {
		case o := <-ch:
			if o.err != nil {
				t.Error(o.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call did not end")
		}
	}
	// Given back as each POST's handler returns, just after its answer.
	for deadline := time.Now().Add(10 * time.Second); s.front.bytes.Held() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes held once every call has ended, want 0", s.front.bytes.Held())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Over HTTP+SSE the POST that would take the client past its share gets
// 503 (its answer would go out on the event stream), and the client's call
// fails at once; a raw POST shows the status and the message.
func TestRequestBytesRefusedOverSSE(t *testing.T) {
	g := mcptest.NewGate()
	s := New(g, Options{Requests: flow.RequestLimits{ClientMaxBytes: 8 << 20, MaxBytes: 64 << 20}}, testLogger(t))
	ts := startHTTP(t, s)
	cs := connectHTTP(t, &sdk.SSEClientTransport{Endpoint: ts.URL + "/sse"})
	for range 2 {
		go func() { _, _ = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: bigArgs()}) }()
	}
	g.WaitStarted(t, Anonymous)
	g.WaitStarted(t, Anonymous)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolName, Arguments: bigArgs()}); err == nil || ctx.Err() != nil {
		t.Errorf("a third call past the client's share over SSE: %v; want an error at once", err)
	}
	g.NoneStarted(t)
	// The same limit holds for all clients together (max_request_bytes).
	s.front.bytes.SetLimits(flow.RequestLimits{ClientMaxBytes: 32 << 20, MaxBytes: 8 << 20})
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"` +
		strings.Repeat("#", 3<<20) + `"}}}`
	resp, err := http.Post(ts.URL+"/mcp", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(text), `"id":9`) || !strings.Contains(string(text), "max_request_bytes") {
		t.Errorf("a POST past max_request_bytes: %d %s; want 200 with a JSON-RPC error for id 9 naming max_request_bytes", resp.StatusCode, text)
	}
	if n := refusedCount(t, s, "max_request_bytes"); n != 1 {
		t.Errorf("pyrun_requests_refused_total{limit=max_request_bytes} is %v, want 1", n)
	}
	g.Release(Anonymous)
	g.Release(Anonymous)
}

// On stdio nothing is refused: pyrun reads no more requests while the
// calls in flight hold the client's share (a request or two more may be on
// their way to the handler as it looks), and reads on once calls end.
func TestRequestBytesHoldStdioBack(t *testing.T) {
	g := mcptest.NewGate()
	s := New(g, Options{Requests: flow.RequestLimits{ClientMaxBytes: 9 << 20}}, testLogger(t))
	p := startStdio(t, s)
	const calls = 8
	go func() {
		for id := 1; id <= calls; id++ {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
				"params": map[string]any{"name": ToolName, "arguments": bigArgs()}})
			if _, err := p.in.Write(append(b, '\n')); err != nil {
				return
			}
		}
	}()
	// Calls of 3 MiB: once they hold 6 MiB, a line of up to 4 MiB more does
	// not fit in 9 MiB, and the reader waits.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.front.bytes.Waiting() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stdio reader does not wait for the calls in flight to give back their bytes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	started := 0
	for len(g.Started) > 0 {
		<-g.Started
		started++
	}
	if started > 4 {
		t.Errorf("%d calls of 3 MiB were read under a share of 9 MiB, want at most 4", started)
	}
	for answered := 0; answered < calls; answered++ {
		g.Release(Anonymous)
		if m := p.recv(t); m["result"] == nil {
			t.Fatalf("answer: %v", m)
		}
	}
}

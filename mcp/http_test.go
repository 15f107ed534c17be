package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// These tests cover the HTTP plumbing that needs no Python: health when no
// worker can start, the SSE endpoint behind a prefix, keep-alive comments.
// The end-to-end tests in cmd/pyrun drive the same handler with real
// workers and real MCP clients.

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: t.Output()})
}

// A pool whose Deno cannot start keeps /healthz at 503 and says why.
func TestHealthWithoutWorkers(t *testing.T) {
	dir := t.TempDir()
	rt := &supervisor.Runtime{Dir: dir, Deno: "/bin/false", DenoDir: dir, WorkDir: dir}
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close(context.Background()) })
	h := New(pool, Options{}, testLogger(t)).HTTPHandler(HTTPOptions{Stats: pool.Stats})

	get := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("healthz body %q: %v", rec.Body, err)
		}
		return rec.Code, body
	}
	code, body := get()
	for _, k := range []string{"workers_ready", "workers_total", "queued"} {
		if _, ok := body[k]; !ok {
			t.Errorf("healthz has no %q: %v", k, body)
		}
	}
	if code != http.StatusServiceUnavailable || body["workers_ready"] != 0.0 || body["workers_total"] != 1.0 {
		t.Errorf("healthz = %d %v, want 503 with 0 of 1 workers ready", code, body)
	}
	// The failed start shows once it has happened.
	deadline := time.Now().Add(30 * time.Second)
	for body["status"] != "failing" && time.Now().Before(deadline) {
		<-time.After(20 * time.Millisecond)
		code, body = get()
	}
	if code != http.StatusServiceUnavailable || body["status"] != "failing" || body["start_error"] == nil {
		t.Errorf("healthz = %d %v, want 503, failing, with the start error", code, body)
	}
	h.Drain()
	if code, body = get(); code != http.StatusServiceUnavailable || body["status"] != "shutting-down" {
		t.Errorf("healthz while draining = %d %v, want 503 shutting-down", code, body)
	}
}

// The SSE endpoint event names the POST URL the client must use: behind a
// proxy that strips a prefix, with that prefix.
func TestSSEEndpointBehindPrefix(t *testing.T) {
	h := New(nil, Options{}, testLogger(t)).HTTPHandler(HTTPOptions{})
	ts := httptest.NewServer(h)
	defer ts.Close()
	for _, tc := range []struct{ prefix, want string }{
		{"", "/sse?sessionid="},
		{"/pyrun", "/pyrun/sse?sessionid="},
		{"/a/b/", "/a/b/sse?sessionid="},
		{"//evil.example", "/sse?sessionid="},
		{"https://evil.example", "/sse?sessionid="},
		{"/x/../y", "/sse?sessionid="},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.URL+"/sse", nil)
		if tc.prefix != "" {
			req.Header.Set("X-Forwarded-Prefix", tc.prefix)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		var data string
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = d
				break
			}
		}
		resp.Body.Close()
		if !strings.HasPrefix(data, tc.want) {
			t.Errorf("X-Forwarded-Prefix %q: endpoint %q, want %q...", tc.prefix, data, tc.want)
		}
	}
}

// A quiet event stream gets comment lines; events still arrive whole.
func TestKeepAliveComments(t *testing.T) {
	release := make(chan struct{})
	var live liveStreams
	h := live.keepAlive(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-release
		fmt.Fprint(w, "event: message\ndata: {\"x\":1}\n\n")
	}), 20*time.Millisecond)
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	comments := 0
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if line == ": keep-alive" {
			if comments++; comments == 3 {
				close(release)
			}
		}
	}
	want := []string{"event: message", `data: {"x":1}`, ""}
	if comments < 3 || len(lines) < 3 || !slices.Equal(lines[len(lines)-3:], want) {
		t.Errorf("stream lines %q: want 3 keep-alive comments, then the event whole", lines)
	}
}

// The response to a POSTed call has its headers set but not sent while the
// call runs; once the call's handler runs, the stream is opened and kept
// alive too.
func TestKeepAliveOpensCallStreams(t *testing.T) {
	var live liveStreams
	release := make(chan struct{})
	h := live.keepAlive(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		// What the SDK does: hand the call to a handler, wait for its result.
		handled := make(chan struct{})
		go func() {
			live.opened(&sdk.CallToolRequest{Extra: &sdk.RequestExtra{Header: r.Header}})
			close(handled)
		}()
		<-handled
		<-release
		fmt.Fprint(w, "event: message\ndata: {}\n\n")
	}), 20*time.Millisecond)
	ts := httptest.NewServer(h)
	defer ts.Close()
	req, _ := http.NewRequest("POST", ts.URL, strings.NewReader("{}"))
	req.Header.Set(streamHeader, "forged")
	resp, err := http.DefaultClient.Do(req) // returns once the headers arrive
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	comments := 0
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == ": keep-alive" {
			if comments++; comments == 2 {
				close(release)
			}
		}
	}
	if comments < 2 || lines[len(lines)-2] != "data: {}" {
		t.Errorf("stream lines %q: want keep-alive comments, then the event", lines)
	}
}

// A response that is not an event stream gets nothing added.
func TestKeepAliveLeavesOtherResponses(t *testing.T) {
	var live liveStreams
	h := live.keepAlive(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}), time.Nanosecond)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
	if rec.Body.String() != "{}" {
		t.Errorf("body %q, want {}", rec.Body)
	}
}

func TestCleanPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"":             "",
		"/":            "",
		"/pyrun":       "/pyrun",
		"/pyrun/":      "/pyrun",
		" /a/b ":       "/a/b",
		"pyrun":        "",
		"//host":       "",
		"/a/../b":      "",
		"/a/./b":       "",
		"/a?x=1":       "",
		"/a#f":         "",
		"/a%2f":        "",
		"/a\\b":        "",
		"/a b":         "",
		"http://h/a":   "",
		"/a\r\nX-Y: z": "",
	} {
		if got := cleanPrefix(in); got != want {
			t.Errorf("cleanPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// A POST taken in before Drain is waited for by WaitAccepted, so that
// serve closes its pools only once the call it carries has run: a call
// that had not reached a pool's queue when the drain began was refused as
// "shutting down" (seen in TestNginx's rolling restart).
func TestWaitAcceptedWaitsForCallsTakenInBeforeDrain(t *testing.T) {
	g := newGate()
	h := New(g, Options{}, testLogger(t)).HTTPHandler(HTTPOptions{Stats: func() supervisor.Stats { return supervisor.Stats{} }})
	web := httptest.NewServer(h)
	t.Cleanup(web.Close)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "drain-test", Version: "test"}, nil).
		Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: web.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	answered := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"python_code": "1"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		answered <- err
	}()
	client := <-g.started
	h.Drain()
	waited := make(chan error, 1)
	go func() { waited <- h.WaitAccepted(t.Context()) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitAccepted returned while an accepted call ran: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.release(client)
	if err := <-answered; err != nil {
		t.Fatalf("the accepted call: %v", err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitAccepted did not return once the call was answered")
	}
	// After the drain, nothing new is counted: a bounded wait returns.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := h.WaitAccepted(ctx); err != nil {
		t.Fatal(err)
	}
}

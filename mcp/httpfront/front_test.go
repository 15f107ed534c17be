package httpfront_test

// Tests of the HTTP front end as its clients see it: pyrun's MCP server
// (mcp.New) on a stand-in pool (mcptest), served by httpfront over a
// loopback port, driven by the go-sdk's clients and by raw HTTP. They need
// no worker runtime; cmd/pyrun's tests drive the same handler in the built
// binary with real workers.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/httpfront"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

// A pool whose Deno cannot start keeps /healthz at 503 and says why.
func TestHealthWithoutWorkers(t *testing.T) {
	dir := t.TempDir()
	rt := &supervisor.Runtime{Dir: dir, Deno: "/bin/false", DenoDir: dir, WorkDir: dir}
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 1}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close(context.Background()) })
	f := startFront(t, pool, mcp.Options{}, httpfront.Options{Stats: pool.Stats})
	code, body := f.health(t)
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
		code, body = f.health(t)
	}
	if code != http.StatusServiceUnavailable || body["status"] != "failing" || body["start_error"] == nil {
		t.Errorf("healthz = %d %v, want 503, failing, with the start error", code, body)
	}
	f.h.Drain()
	if code, body = f.health(t); code != http.StatusServiceUnavailable || body["status"] != "shutting-down" {
		t.Errorf("healthz while draining = %d %v, want 503 shutting-down", code, body)
	}
}

// The SSE endpoint event names the POST URL the client must use: behind a
// proxy that strips a prefix, with that prefix.
func TestSSEEndpointBehindPrefix(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{})
	for _, tc := range []struct{ prefix, want string }{
		{"", "/sse?sessionid="},
		{"/pyrun", "/pyrun/sse?sessionid="},
		{"/a/b/", "/a/b/sse?sessionid="},
		{"//evil.example", "/sse?sessionid="},
		{"https://evil.example", "/sse?sessionid="},
		{"/x/../y", "/sse?sessionid="},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", f.base+"/sse", nil)
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

// A POST taken in before Drain is waited for by WaitAccepted, so that
// serve closes its pools only once the call it carries has run: a call
// that had not reached a pool's queue when the drain began was refused as
// "shutting down" (seen in TestNginx's rolling restart).
func TestWaitAcceptedWaitsForCallsTakenInBeforeDrain(t *testing.T) {
	g := mcptest.NewGate()
	f := startFront(t, g, mcp.Options{}, httpfront.Options{})
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, "")
	answered := make(chan error, 1)
	go func() {
		res, err := callCode(t.Context(), cs, "1")
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		answered <- err
	}()
	client := <-g.Started
	f.h.Drain()
	waited := make(chan error, 1)
	go func() { waited <- f.h.WaitAccepted(t.Context()) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitAccepted returned while an accepted call ran: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.Release(client)
	if err := <-answered; err != nil {
		t.Fatalf("the accepted call: %v", err)
	}
	if err := mcptest.Receive(t, waited, 10*time.Second, "WaitAccepted did not return once the call was answered"); err != nil {
		t.Fatal(err)
	}
	// After the drain, nothing new is counted: a bounded wait returns.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := f.h.WaitAccepted(ctx); err != nil {
		t.Fatal(err)
	}
}

// While draining, what would open a session or a stream is refused with
// 503 and Retry-After, and a session already open is still served; then
// CloseSessions ends the open sessions and their streams.
func TestDrainAndCloseSessions(t *testing.T) {
	f := startFront(t, mcptest.Result(supervisor.Result{Status: supervisor.StatusSuccess}), mcp.Options{}, httpfront.Options{})
	streamable := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	sse := connect(t, &sdk.SSEClientTransport{Endpoint: f.base + "/sse"}, sessionRevision)
	f.h.Drain()
	for _, req := range []*http.Request{
		httptest.NewRequest("POST", f.base+"/mcp", strings.NewReader(initBody)),
		httptest.NewRequest("GET", f.base+"/sse", nil),
	} {
		req.RequestURI = ""
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s while draining: %s, want 503 with Retry-After", req.Method, req.URL.Path, resp.Status)
		}
	}
	for name, cs := range map[string]*sdk.ClientSession{"streamable": streamable, "sse": sse} {
		if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
			t.Errorf("a call in an open %s session while draining: %v %v", name, err, res)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.h.CloseSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.metrics(t)["pyrun_sessions"]; n != 0 {
		t.Errorf("pyrun_sessions %v after CloseSessions, want 0", n)
	}
	if _, err := callCode(ctx, sse, "1"); err == nil {
		t.Error("a call in an HTTP+SSE session after CloseSessions succeeded")
	}
}

// MCP sessions are capped per client and in all (mcptest.SessionCaps).
func TestSessionCaps(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{Protect: tokens,
		Sessions: httpfront.SessionLimits{Max: 5, ClientMax: 3}})
	mcptest.SessionCaps(t, f.front(), bearer("a-token"), bearer("b-token"), bearer("c-token"))
}

// A client at its cap whose sessions are all busy gets its new session
// refused, naming client_max_mcp_sessions: a session with a call running
// is not evicted.
func TestSessionCapSparesBusySessions(t *testing.T) {
	g := mcptest.NewGate()
	f := startFront(t, g, mcp.Options{}, httpfront.Options{Sessions: httpfront.SessionLimits{ClientMax: 1}})
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	done := make(chan error, 1)
	go func() { _, err := callCode(t.Context(), cs, "1"); done <- err }()
	g.WaitStarted(t, mcp.Anonymous)
	id, code, body := openSession(t, http.DefaultClient, f.base)
	if id != "" || code != http.StatusServiceUnavailable || !strings.Contains(body, "client_max_mcp_sessions") {
		t.Errorf("a second session while the first runs a call: %d %q, want 503 naming client_max_mcp_sessions", code, body)
	}
	g.Release(mcp.Anonymous)
	if err := <-done; err != nil {
		t.Errorf("the busy session's call: %v", err)
	}
	if n := f.metrics(t)[`pyrun_mcp_sessions_refused_total{cap="client"}`]; n != 1 {
		t.Errorf(`pyrun_mcp_sessions_refused_total{cap="client"} = %v, want 1`, n)
	}
}

// DELETE of a session while its call runs stops the call
// (mcptest.DeleteStopsCalls).
func TestDeleteStopsCalls(t *testing.T) {
	g := mcptest.NewGate()
	f := startFront(t, g, mcp.Options{}, httpfront.Options{})
	mcptest.DeleteStopsCalls(t, f.front(), func(t *testing.T) { g.WaitStarted(t, mcp.Anonymous) })
}

// DELETE waits for the answers of the session's calls, not for its event
// stream, which only the session's end ends: a client that holds the
// standalone GET stream open (the go-sdk's does) has its DELETE answered at
// once. (It waited for deleteWait, 10s, and the go-sdk's client gives up
// on its DELETE after 5s.)
func TestDeleteDoesNotWaitForTheSessionStream(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{})
	id, code, body := openSession(t, http.DefaultClient, f.base)
	if id == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	get, _ := http.NewRequestWithContext(t.Context(), "GET", f.base+"/mcp", nil)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Session-Id", id)
	get.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	stream, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp: %s", stream.Status)
	}
	del, _ := http.NewRequestWithContext(t.Context(), "DELETE", f.base+"/mcp", nil)
	del.Header.Set("Mcp-Session-Id", id)
	del.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	began := time.Now()
	resp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(began); resp.StatusCode != http.StatusNoContent || took > 3*time.Second {
		t.Errorf("DELETE with the session's GET stream open: %s after %s, want 204 at once", resp.Status, took.Round(time.Millisecond))
	}
	// The stream ends with the session.
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Errorf("the session's stream: %v", err)
	}
}

// A client that drops the POST carrying a call stops the call: its
// context ends with httpfront.ErrRequestClosed, so the pool frees the
// worker. Over 2026-07-28 (stateless) a call's POST is all it has.
func TestDroppedPOSTStopsTheCall(t *testing.T) {
	started := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	r := mcptest.Func(func(ctx context.Context, _ supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return supervisor.Result{}, ctx.Err()
	})
	f := startFront(t, r, mcp.Options{}, httpfront.Options{})
	id, code, body := openSession(t, http.DefaultClient, f.base)
	if id == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	ctx, drop := context.WithCancel(t.Context())
	go func() {
		if resp, err := post(ctx, http.DefaultClient, f.base, id, callBody(3, "while True: pass")); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	drop()
	if cause := mcptest.Receive(t, stopped, 10*time.Second, "the call went on after its POST was dropped"); !errors.Is(cause, httpfront.ErrRequestClosed) {
		t.Errorf("the call stopped for %v, want %v", cause, httpfront.ErrRequestClosed)
	}
}

// An HTTP+SSE session opened with credentials takes POSTs only from the
// same client: anyone else gets 403, as on Streamable HTTP (where the SDK
// checks).
func TestSSESessionBoundToItsClient(t *testing.T) {
	f := startFront(t, mcptest.Result(supervisor.Result{Status: supervisor.StatusSuccess}), mcp.Options{}, httpfront.Options{Protect: tokens})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/sse", nil)
	resp, err := bearer("alice-token").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var endpoint string
	for sc := bufio.NewScanner(resp.Body); endpoint == "" && sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			endpoint = d
		}
	}
	for _, tc := range []struct {
		who  *http.Client
		want int
	}{
		{bearer("mallory-token"), http.StatusForbidden},
		{http.DefaultClient, http.StatusUnauthorized},
		{bearer("alice-token"), http.StatusAccepted},
	} {
		resp, err := tc.who.Post(f.base+endpoint, "application/json", strings.NewReader(initBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %s: %s, want %d", endpoint, resp.Status, tc.want)
		}
	}
	// And alice's own client works through it.
	cs := connect(t, &sdk.SSEClientTransport{Endpoint: f.base + "/sse", HTTPClient: bearer("alice-token")}, sessionRevision)
	if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
		t.Errorf("alice's call over HTTP+SSE: %v %v", err, res)
	}
}

// A request that arrives on a loopback address must name a loopback host
// (DNS-rebinding protection).
func TestDNSRebindingProtection(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{})
	for _, path := range []string{"/mcp", "/sse"} {
		req, _ := http.NewRequest("GET", f.base+path, nil)
		req.Host = "attacker.example:3001"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s with Host %s: %s, want 403", path, req.Host, resp.Status)
		}
	}
}

// Stateless: no session is made (no Mcp-Session-Id, a GET for a session's
// stream is refused), and calls are served each on its own, in any
// revision.
func TestStateless(t *testing.T) {
	f := startFront(t, mcptest.Result(supervisor.Result{Status: supervisor.StatusSuccess}), mcp.Options{}, httpfront.Options{Stateless: true})
	mcptest.Stateless(t, f.front())
	for _, rev := range []string{sessionRevision, ""} {
		cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, rev)
		if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
			t.Errorf("a stateless call (revision %q): %v %v", rev, err, res)
		}
	}
	if m := f.metrics(t); m["pyrun_sessions"] != 0 {
		t.Errorf("pyrun_sessions = %v with --stateless, want 0", m["pyrun_sessions"])
	}
}

// A 2026-07-28 client over /mcp is served by the stateless handler even
// when /mcp keeps sessions for older revisions: it holds no session.
func TestRevision20260728HoldsNoSession(t *testing.T) {
	f := startFront(t, mcptest.Result(supervisor.Result{Status: supervisor.StatusSuccess}), mcp.Options{}, httpfront.Options{})
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, "2026-07-28")
	if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
		t.Fatalf("a 2026-07-28 call: %v %v", err, res)
	}
	if cs.ID() != "" {
		t.Errorf("the 2026-07-28 session has id %q, want none", cs.ID())
	}
	if m := f.metrics(t); m["pyrun_sessions"] != 0 {
		t.Errorf("pyrun_sessions = %v, want 0", m["pyrun_sessions"])
	}
}

// A session idle for SessionTimeout is closed; its next call fails, and a
// new session works.
func TestSessionTimeout(t *testing.T) {
	f := startFront(t, mcptest.Result(supervisor.Result{Status: supervisor.StatusSuccess}), mcp.Options{},
		httpfront.Options{SessionTimeout: 300 * time.Millisecond})
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
		t.Fatalf("a call: %v %v", err, res)
	}
	f.waitMetric(t, "pyrun_sessions", func(v float64) bool { return v == 0 })
	if _, err := callCode(t.Context(), cs, "1"); err == nil {
		t.Error("a call in the expired session succeeded")
	}
	cs = connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	if res, err := callCode(t.Context(), cs, "2"); err != nil || res.IsError {
		t.Errorf("a call in a new session: %v %v", err, res)
	}
}

// A client that gives up on a connection quiet for 400ms, as httpx's read
// timeout and proxies do, keeps a 1s call: the server sends keep-alive
// comments. Without them the call is lost.
func TestLongCallsSurviveIdleTimeouts(t *testing.T) {
	slow := mcptest.Func(func(ctx context.Context, _ supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
		select {
		case <-time.After(time.Second):
			return supervisor.Result{Status: supervisor.StatusSuccess}, nil
		case <-ctx.Done():
			return supervisor.Result{}, ctx.Err()
		}
	})
	hc := mcptest.IdleTimeoutClient(400 * time.Millisecond)
	for _, keepAlive := range []time.Duration{50 * time.Millisecond, -1} {
		f := startFront(t, slow, mcp.Options{}, httpfront.Options{KeepAlive: keepAlive})
		for _, transport := range []sdk.Transport{
			&sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", HTTPClient: hc, MaxRetries: -1},
			&sdk.SSEClientTransport{Endpoint: f.base + "/sse", HTTPClient: hc},
		} {
			if keepAlive < 0 {
				if _, ok := transport.(*sdk.SSEClientTransport); ok {
					continue // its stream would time out while idle before the call
				}
			}
			cs := connect(t, transport, sessionRevision)
			res, err := callCode(t.Context(), cs, "import time; time.sleep(1)")
			switch {
			case keepAlive > 0 && (err != nil || res.IsError):
				t.Errorf("%T: a 1s call through a 400ms idle timeout with keep-alive comments: %v %v", transport, err, res)
			case keepAlive < 0 && err == nil:
				t.Errorf("%T: a 1s call on a quiet stream survived a 400ms idle timeout: %v", transport, res)
			}
		}
	}
}

// A client that opens /sse, stops reading it and posts calls with large
// results: the results that wait for it are bounded, the stream is closed
// when a write misses the write timeout, and /metrics counts both.
// Streamable HTTP responses that are never read are closed the same way.
// Everyone else is still served.
func TestStalledReaders(t *testing.T) {
	// Results of 4 MiB (their stdout), more than the kernel buffers on the
	// way to a client that does not read.
	big := supervisor.Result{Status: supervisor.StatusSuccess, Stdout: strings.Repeat("x", 4<<20)}
	f := startFront(t, mcptest.Result(big), mcp.Options{MaxOutput: 4 << 20,
		Delivery: flow.DeliveryLimits{WriteTimeout: 500 * time.Millisecond, SessionResults: 4}}, httpfront.Options{})

	// HTTP+SSE: read the endpoint event, then nothing more.
	_, postSSE := mcptest.StalledSSE(t, f.addr)
	postSSE(initBody)
	postSSE(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i := range 6 {
		postSSE(callBody(10+i, "print('x' * 2**22)"))
	}
	// Streamable HTTP: calls whose responses are never read.
	id, code, body := openSession(t, http.DefaultClient, f.base)
	if id == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	for i := range 2 {
		mcptest.StalledPost(t, f.addr, id, callBody(100+i, "print('x' * 2**22)"))
	}
	for _, series := range []string{`pyrun_stream_stalls_total{transport="sse"}`, `pyrun_stream_stalls_total{transport="streamable"}`} {
		f.waitMetric(t, series, func(v float64) bool { return v >= 1 })
	}
	m := f.metrics(t)
	if m[`pyrun_results_held_back_total{transport="sse",what="result"}`]+m[`pyrun_results_held_back_total{transport="sse",what="call"}`] < 1 {
		t.Errorf("no result or call held back: %v %v", m[`pyrun_results_held_back_total{transport="sse",what="result"}`],
			m[`pyrun_results_held_back_total{transport="sse",what="call"}`])
	}
	// pyrun still serves everyone else, and holds nothing for the stalled.
	if code, _ := f.health(t); code != http.StatusOK {
		t.Errorf("/healthz after the stalls: %d", code)
	}
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	if res, err := callCode(t.Context(), cs, "1"); err != nil || res.IsError {
		t.Errorf("another client's call after the stalls: %v", err)
	}
	f.waitMetric(t, "pyrun_results_waiting_bytes", func(v float64) bool { return v == 0 })
}

// A POST's bytes are held from its first byte to its answer, and shown in
// /metrics. (mcp's requestbytes_test.go covers the refusals.)
func TestRequestBytesHeldGauge(t *testing.T) {
	g := mcptest.NewGate()
	f := startFront(t, g, mcp.Options{Requests: flow.RequestLimits{ClientMaxBytes: 8 << 20}}, httpfront.Options{})
	cs := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", MaxRetries: -1}, sessionRevision)
	arg := strings.Repeat("#", 1<<20)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = callCode(t.Context(), cs, arg) })
	g.WaitStarted(t, mcp.Anonymous)
	if held := f.metrics(t)["pyrun_request_bytes_held"]; held < 1<<20 || held > 2<<20 {
		t.Errorf("pyrun_request_bytes_held = %v while a call of 1 MiB runs", held)
	}
	g.Release(mcp.Anonymous)
	wg.Wait()
	f.waitMetric(t, "pyrun_request_bytes_held", func(v float64) bool { return v == 0 })
}

// The /output/ files of a call are read back with resources/read by the
// client of the credentials that made the call, and by no one else.
func TestOutputFilesBoundToTheirClient(t *testing.T) {
	r := mcptest.Func(func(context.Context, supervisor.Job, supervisor.Events) (supervisor.Result, error) {
		return supervisor.Result{Status: supervisor.StatusSuccess,
			Files: []supervisor.OutputFile{mcptest.OutputFile(t, "out.txt", "text/plain", []byte("alice's"))}}, nil
	})
	f := startFront(t, r, mcp.Options{}, httpfront.Options{Protect: tokens})
	alice := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", HTTPClient: bearer("alice-token"), MaxRetries: -1}, sessionRevision)
	bob := connect(t, &sdk.StreamableClientTransport{Endpoint: f.base + "/mcp", HTTPClient: bearer("bob-token"), MaxRetries: -1}, sessionRevision)
	res, err := callCode(t.Context(), alice, "open('/output/out.txt', 'w').write(\"alice's\")")
	if err != nil || res.IsError {
		t.Fatalf("alice's call: %v %v", err, res)
	}
	var uri string
	for _, c := range res.Content {
		if l, ok := c.(*sdk.ResourceLink); ok {
			uri = l.URI
		}
	}
	if uri == "" {
		t.Fatalf("no resource link in %v", res.Content)
	}
	read, err := alice.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: uri})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "alice's" {
		t.Errorf("alice reads %s: %v %v, want her file", uri, err, read)
	}
	if read, err := bob.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: uri}); err == nil {
		t.Errorf("bob read alice's %s: %v", uri, read.Contents)
	}
}

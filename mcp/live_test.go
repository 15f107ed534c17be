package mcp

// Tests of live runs inside one pyrun server with several sessions, with a
// real pool of Deno workers: sessions over Streamable HTTP and SSE each get
// only their own output, a slow client never holds a call back, and a client
// that drops its HTTP request frees the call's worker. The stdio end of the
// same features is tested end to end in cmd/pyrun (live_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// testPool is one two-worker pool for the package's tests; it starts on
// first use and stops in TestMain.
var testPool struct {
	once sync.Once
	pool *supervisor.Pool
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if p := testPool.pool; p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := p.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "closing the test pool: %v\n", err)
			code = 1
		}
		cancel()
	}
	os.Exit(code)
}

// runner is the test pool, counting the calls that have returned from it.
type runner struct {
	pool *supervisor.Pool
	mu   sync.Mutex
	ran  int
	done chan struct{} // closed and replaced when a call returns
}

func (r *runner) Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	res, err := r.pool.Run(ctx, job, ev)
	r.mu.Lock()
	r.ran++
	close(r.done)
	r.done = make(chan struct{})
	r.mu.Unlock()
	return res, err
}

// waitRan waits until n calls have returned from the pool.
func (r *runner) waitRan(t *testing.T, n int, within time.Duration) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		r.mu.Lock()
		ran, ch := r.ran, r.done
		r.mu.Unlock()
		if ran >= n {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("%d calls returned from the pool within %v, want %d", ran, within, n)
		}
	}
}

// logLines collects the server's own log (JSON lines) for assertions.
type logLines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogLines() *logLines { return &logLines{changed: make(chan struct{})} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.changed)
	l.changed = make(chan struct{})
	return l.buf.Write(p)
}

// find waits until the server has logged a record with message msg, for at
// most a few seconds, and returns all such records.
func (l *logLines) find(msg string) []map[string]any {
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		l.mu.Lock()
		text, ch := l.buf.String(), l.changed
		l.mu.Unlock()
		var out []map[string]any
		for line := range strings.Lines(text) {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == msg {
				out = append(out, rec)
			}
		}
		if len(out) > 0 {
			return out
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil
		}
	}
}

// newTestServer builds a pyrun MCP server on the shared test pool.
func newTestServer(t *testing.T, live LiveOptions) (*Server, *runner, *logLines) {
	t.Helper()
	rt := testruntime.Get(t)
	testPool.once.Do(func() {
		testPool.pool, testPool.err = supervisor.NewPool(rt, supervisor.Config{Workers: 2}, hclog.NewNullLogger())
	})
	if testPool.err != nil {
		t.Fatal(testPool.err)
	}
	lines := newLogLines()
	log := hclog.New(&hclog.LoggerOptions{Name: "pyrun", Level: hclog.Debug, Output: lines, JSONFormat: true})
	r := &runner{pool: testPool.pool, done: make(chan struct{})}
	s := New(r, Options{
		Version: "test", PythonVersion: rt.Python, PyodideVersion: rt.Pyodide,
		Timeout: 30 * time.Second, MaxOutput: 64 << 10, Live: live,
	}, log)
	return s, r, lines
}

// session is a connected client that records its log messages.
type session struct {
	cs   *sdk.ClientSession
	mu   sync.Mutex
	logs []LogData
	lvls []sdk.LoggingLevel
}

func connect(t *testing.T, transport sdk.Transport) *session {
	t.Helper()
	s := &session{}
	c := sdk.NewClient(&sdk.Implementation{Name: "live-test", Version: "test"}, &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			var d LogData
			raw, _ := json.Marshal(r.Params.Data)
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Errorf("log data %s: %v", raw, err)
			}
			s.mu.Lock()
			s.logs = append(s.logs, d)
			s.lvls = append(s.lvls, r.Params.Level)
			s.mu.Unlock()
		},
	})
	// The SSE client's stream lives as long as the context it connected with.
	// These tests set the session's level (logging/setLevel), which
	// 2026-07-28 replaced by a level per request: they speak 2025-11-25.
	cs, err := c.Connect(t.Context(), transport, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	s.cs = cs
	if err := cs.SetLoggingLevel(t.Context(), &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *session) call(ctx context.Context, code string) (*sdk.CallToolResult, Structured, error) {
	var sc Structured
	res, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"python_code": code}})
	if err != nil {
		return nil, sc, err
	}
	raw, _ := json.Marshal(res.StructuredContent)
	err = json.Unmarshal(raw, &sc)
	return res, sc, err
}

// streamed returns the text of the session's stdout and stderr messages, in
// order, and waits until it ends with suffix.
func (s *session) streamed(t *testing.T, suffix string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b strings.Builder
		s.mu.Lock()
		for _, d := range s.logs {
			if d.Stream == "stdout" || d.Stream == "stderr" {
				b.WriteString(d.Text)
			}
		}
		s.mu.Unlock()
		if strings.HasSuffix(b.String(), suffix) || time.Now().After(deadline) {
			return b.String()
		}
		// The client hands notifications to its handler after it has
		// delivered the result that followed them; give it a moment.
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSessionsGetOnlyTheirOwnOutput(t *testing.T) {
	s, _, _ := newTestServer(t, LiveOptions{})
	web := httptest.NewServer(s.HTTPHandler(HTTPOptions{}))
	t.Cleanup(web.Close) // after the sessions close

	sessions := map[string]*session{
		"http-a": connect(t, &sdk.StreamableClientTransport{Endpoint: web.URL + "/mcp"}),
		"http-b": connect(t, &sdk.StreamableClientTransport{Endpoint: web.URL + "/mcp"}),
		"sse":    connect(t, &sdk.SSEClientTransport{Endpoint: web.URL + "/sse"}),
	}
	code := `import sys, asyncio
for i in range(8):
    print(WHO, i, file=sys.stderr if i % 2 else sys.stdout)
    await asyncio.sleep(0.02)
`
	var wg sync.WaitGroup
	for who, sess := range sessions {
		wg.Go(func() {
			res, err := sess.cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{
				"python_code": code, "global_variables": map[string]any{"WHO": who},
			}})
			if err != nil || res.IsError {
				t.Errorf("%s: %v %+v", who, err, res)
			}
		})
	}
	wg.Wait()
	for who, sess := range sessions {
		var want strings.Builder
		for i := range 8 {
			fmt.Fprintf(&want, "%s %d\n", who, i)
		}
		if got := sess.streamed(t, who+" 7\n"); got != want.String() {
			t.Errorf("session %s got the lines:\n%s\nwant:\n%s", who, got, want.String())
		}
		sess.mu.Lock()
		for i, d := range sess.logs {
			want := map[string]sdk.LoggingLevel{"stdout": "info", "stderr": "warning"}[d.Stream]
			if want != "" && sess.lvls[i] != want {
				t.Errorf("session %s: %s at level %s, want %s", who, d.Stream, sess.lvls[i], want)
			}
		}
		sess.mu.Unlock()
	}
}

// gated holds back the log messages a server sends until the gate opens:
// a client that reads slowly, as the server sees it.
type gated struct {
	sdk.Transport
	open chan struct{}
}

func (g gated) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := g.Transport.Connect(ctx)
	return gatedConn{c, g.open}, err
}

type gatedConn struct {
	sdk.Connection
	open chan struct{}
}

func (c gatedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "notifications/message" {
		<-c.open
	}
	return c.Connection.Write(ctx, msg)
}

func TestSlowClientNeverHoldsTheCallBack(t *testing.T) {
	s, r, _ := newTestServer(t, LiveOptions{Buffer: 8 << 10})
	serverT, clientT := sdk.NewInMemoryTransports()
	open := make(chan struct{})
	ss, err := s.sdk.Connect(t.Context(), gated{serverT, open}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	sess := connect(t, clientT)

	// 40 KiB of output, far more than the live buffer holds.
	code := "for i in range(40):\n    print(str(i).rjust(4) + 'x' * 1019)\n"
	type answer struct {
		sc  Structured
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		_, sc, err := sess.call(t.Context(), code)
		answered <- answer{sc, err}
	}()
	// The call runs to its end on the worker while no log message can get
	// through to the client.
	r.waitRan(t, 1, 30*time.Second)
	close(open)
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.sc.Status != supervisor.StatusSuccess || len(a.sc.Stdout) != 40*1024 {
		t.Fatalf("status %s with %d bytes of stdout; the result must have all 40 KiB", a.sc.Status, len(a.sc.Stdout))
	}
	// What was sent live, plus what the notices say was left out, is all of
	// it. There is a notice for each run of output that did not fit: one for
	// what came while the first batch waited for the client, and one in that
	// batch when the buffer had filled before it was taken.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sess.mu.Lock()
		sent, lost, gaps := 0, 0, 0
		for _, d := range sess.logs {
			switch d.Stream {
			case "stdout":
				sent += len(d.Text)
			case "pyrun":
				gaps++
				var n int
				if _, err := fmt.Sscanf(d.Text, "%d bytes of output were not sent here", &n); err != nil {
					t.Errorf("unexpected notice %q", d.Text)
				}
				lost += n
			}
		}
		sess.mu.Unlock()
		if gaps > 0 && sent+lost == 40*1024 {
			t.Logf("%d bytes sent live, %d left out (%d notices)", sent, lost, gaps)
			if sent > 2*(8<<10) {
				t.Errorf("%d bytes sent live through an 8 KiB buffer (plus the batch in flight) while the client was stalled", sent)
			}
			break
		}
		if time.Now().After(deadline) {
			sess.mu.Lock()
			for _, d := range sess.logs {
				t.Logf("%s: %d bytes: %.60q", d.Stream, len(d.Text), d.Text)
			}
			sess.mu.Unlock()
			t.Fatalf("%d bytes sent live, %d left out in %d notices; want 40 KiB in all, some left out", sent, lost, gaps)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// severable lets a test drop the HTTP request that carries a tool call
// while the client's call itself goes on, as a client whose connection
// breaks.
type severable struct {
	mu    sync.Mutex
	sever context.CancelFunc
}

func (s *severable) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			ctx, cancel := context.WithCancel(req.Context())
			s.mu.Lock()
			s.sever = cancel
			s.mu.Unlock()
			req = req.WithContext(ctx)
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (s *severable) cut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sever == nil {
		return false
	}
	s.sever()
	return true
}

func TestDroppedHTTPRequestCancelsTheCall(t *testing.T) {
	s, r, lines := newTestServer(t, LiveOptions{})
	web := httptest.NewServer(s.HTTPHandler(HTTPOptions{}))
	t.Cleanup(web.Close) // after the session closes
	rt := &severable{}
	sess := connect(t, &sdk.StreamableClientTransport{Endpoint: web.URL + "/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _, _ = sess.call(ctx, "print('started')\nwhile True:\n    pass\n") }()
	// Once the call runs, drop its HTTP request.
	if got := sess.streamed(t, "started\n"); got != "started\n" {
		t.Fatalf("the call did not start: streamed %q", got)
	}
	if !rt.cut() {
		t.Fatal("no tools/call request went through the client's transport")
	}
	cutAt := time.Now()
	r.waitRan(t, 1, 5*time.Second)
	t.Logf("the call stopped %v after its HTTP request was dropped", time.Since(cutAt).Round(time.Millisecond))
	if d := time.Since(cutAt); d > 1500*time.Millisecond {
		t.Errorf("the call stopped %v after its request was dropped; want within a second", d)
	}
	recs := lines.find("call cancelled")
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["why"]), "HTTP request") {
		t.Errorf("logged cancellations %v; want one, for the dropped HTTP request", recs)
	}
}

func TestLiveBufferIsBounded(t *testing.T) {
	l := &live{opts: LiveOptions{Buffer: 4 << 10}.withDefaults(), wake: make(chan struct{}, 1)}
	written := 0
	for i := range 1000 {
		text := strings.Repeat("o", i%50+1) + "\n"
		written += len(text)
		if i%7 == 0 {
			l.Output(supervisor.Chunk{Stream: supervisor.Stderr, Text: text})
		} else {
			l.Output(supervisor.Chunk{Stream: supervisor.Stdout, Text: text})
		}
		if l.size > l.opts.Buffer+entryCost {
			t.Fatalf("after %d writes the buffer holds %d bytes, over its bound of %d", i+1, l.size, l.opts.Buffer)
		}
	}
	l.Notice(supervisor.Notice{Severe: true, Text: "the worker died"})
	kept, lost := 0, 0
	for _, e := range l.pending {
		switch e.kind {
		case kindGap:
			lost += e.lost
		case kindStdout, kindStderr:
			kept += len(e.text)
		}
	}
	if kept+lost != written || lost == 0 {
		t.Errorf("kept %d and counted %d as lost of %d written; want all accounted for, some lost", kept, lost, written)
	}
	if last := l.pending[len(l.pending)-1]; last.kind != kindSevere {
		t.Errorf("the last entry is of kind %d; a notice must get in even when the buffer is full", last.kind)
	}
}

func TestHangUpCancelsTheCall(t *testing.T) {
	s, r, lines := newTestServer(t, LiveOptions{})
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ss, err := s.sdk.Connect(t.Context(), &sdk.IOTransport{Reader: toServer, Writer: fromServer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	sess := connect(t, &sdk.IOTransport{Reader: toClient, Writer: fromClient})

	go func() { _, _, _ = sess.call(t.Context(), "print('started')\nwhile True:\n    pass\n") }()
	if got := sess.streamed(t, "started\n"); got != "started\n" {
		t.Fatalf("the call did not start: streamed %q", got)
	}
	// The client goes away without a word: the server reads the end of its input.
	hungUp := time.Now()
	fromClient.Close()
	r.waitRan(t, 1, 5*time.Second)
	if d := time.Since(hungUp); d > 1500*time.Millisecond {
		t.Errorf("the call stopped %v after the client hung up; want within a second", d)
	}
	recs := lines.find("call cancelled")
	if len(recs) != 1 || recs[0]["why"] != "the client hung up" {
		t.Errorf("logged cancellations %v; want one, for the hang-up", recs)
	}
}

func TestCancelledOverHTTP(t *testing.T) {
	// The SDK's handler alone, without pyrun's HTTP front end: what stops
	// the call is the client's notifications/cancelled, which the Go
	// client sends when the call's context ends.
	s, r, lines := newTestServer(t, LiveOptions{})
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk }, nil)
	web := httptest.NewServer(handler)
	t.Cleanup(web.Close) // after the session closes
	sess := connect(t, &sdk.StreamableClientTransport{Endpoint: web.URL})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _, _ = sess.call(ctx, "import time\nprint('started')\ntime.sleep(100)\n") }()
	if got := sess.streamed(t, "started\n"); got != "started\n" {
		t.Fatalf("the call did not start: streamed %q", got)
	}
	cancelledAt := time.Now()
	cancel()
	r.waitRan(t, 1, 5*time.Second)
	if d := time.Since(cancelledAt); d > 1500*time.Millisecond {
		t.Errorf("the call stopped %v after the client cancelled it; want within a second", d)
	}
	recs := lines.find("call cancelled")
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["why"]), "notifications/cancelled") {
		t.Errorf("logged cancellations %v; want one, by notifications/cancelled", recs)
	}
	// The worker is free and well: the next call runs.
	_, sc, err := sess.call(t.Context(), "6 * 7")
	if err != nil || string(sc.ReturnValue) != "42" {
		t.Errorf("the next call: %v, return value %s; want 42", err, sc.ReturnValue)
	}
}

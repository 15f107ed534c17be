package codemode_test

// A server that misbehaves on purpose: answers past the message limit,
// answers cut in half, answers of the wrong shape, lines that are not
// JSON. Each fails the one tool call it answers; the connection, and the
// calls of other runs on it, go on.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/mcptest"
)

// misbehaveEnv, set to "stdio", makes the test binary the misbehaving
// server on its stdin and stdout.
const misbehaveEnv = "PYRUN_TEST_UPSTREAM"

func TestMain(m *testing.M) {
	if os.Getenv(misbehaveEnv) == "stdio" {
		// Servers print their settings: some their whole environment.
		fmt.Fprintf(os.Stderr, "starting with SECRET_TOKEN=%s \x1b[31mred\u202e\n", os.Getenv("SECRET_TOKEN"))
		for i := range stderrFloodLines(os.Getenv("STDERR_FLOOD")) {
			fmt.Fprintf(os.Stderr, "line %d %s\n", i, strings.Repeat("e", 2000))
		}
		out := &serverOut{w: os.Stdout}
		err := misbehaving(out).Run(context.Background(), &sdk.IOTransport{Reader: os.Stdin, Writer: out})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func stderrFloodLines(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Markers in a tool's result that make serverOut rewrite the message
// carrying it.
const (
	markCut   = "CUT-ME"      // the message is cut in half: not JSON
	markShape = "WRONG-SHAPE" // the result is 42, not a CallToolResult
	markLate  = "LATE-ID"     // the id goes after the result, as the TypeScript SDK writes it
)

// serverOut is what the misbehaving server writes to, one message a Write.
type serverOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *serverOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.w.Write(rewrite(p))
	return len(p), err
}

func (o *serverOut) Close() error { return nil }

// raw writes a line of its own between the server's messages.
func (o *serverOut) raw(line []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(line, '\n'))
}

// rewrite changes the JSON-RPC message in p (a line, a body or an SSE
// event) as the marker in it asks.
func rewrite(p []byte) []byte {
	i, j := bytes.Index(p, []byte(`{"jsonrpc"`)), bytes.LastIndexByte(p, '}')
	if i < 0 || j < i {
		return p
	}
	msg := p[i : j+1]
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	_ = json.Unmarshal(msg, &m)
	var out []byte
	switch {
	case bytes.Contains(msg, []byte(markCut)):
		out = msg[:len(msg)/2]
	case bytes.Contains(msg, []byte(markShape)):
		out = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":42}}`, m.ID)
	case bytes.Contains(msg, []byte(markLate)):
		out = fmt.Appendf(nil, `{"result":%s,"jsonrpc":"2.0","id":%s}`, m.Result, m.ID)
	default:
		return p
	}
	return append(append(append([]byte(nil), p[:i]...), out...), p[j+1:]...)
}

type textArgs struct {
	Text  string `json:"text"`
	Bytes int    `json:"bytes,omitempty"`
}

type holdArgs struct {
	Started string `json:"started"`
	Release string `json:"release"`
}

// misbehaving is the server's tools. out is nil over HTTP, where the
// tools that write lines of their own are not offered.
func misbehaving(out *serverOut) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "misbehaving", Version: "1"}, nil)
	textResult := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "The server's process id."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return textResult(strconv.Itoa(os.Getpid())), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "text", Description: "Its text, and that many bytes more."},
		func(_ context.Context, _ *sdk.CallToolRequest, a textArgs) (*sdk.CallToolResult, any, error) {
			return textResult(a.Text + strings.Repeat("x", a.Bytes)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "hold", Description: "Makes the file started, then answers once the file release exists."},
		func(ctx context.Context, _ *sdk.CallToolRequest, a holdArgs) (*sdk.CallToolResult, any, error) {
			if err := os.WriteFile(a.Started, nil, 0o644); err != nil {
				return nil, nil, err
			}
			for {
				if _, err := os.Stat(a.Release); err == nil {
					return textResult("released"), nil, nil
				}
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	if out != nil {
		sdk.AddTool(s, &sdk.Tool{Name: "garbage", Description: "Writes lines that are no messages of its call."},
			func(_ context.Context, _ *sdk.CallToolRequest, a textArgs) (*sdk.CallToolResult, any, error) {
				out.raw([]byte("this is not JSON"))
				out.raw(bytes.Repeat([]byte("y"), a.Bytes))
				out.raw(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"%s"}}`,
					strings.Repeat("z", a.Bytes)))
				out.raw([]byte(`{"jsonrpc":"2.0","id":987654,"result":{"content":[]}}`)) // answers no call
				out.raw([]byte(`[1, 2`))
				return textResult("after garbage"), nil, nil
			})
	}
	return s
}

// TestBadAnswersFailOneCall: over stdio, each bad message fails the call
// it answers, or none; a call of another run in flight meanwhile gets its
// answer, and the same server process serves the next calls.
func TestBadAnswersFailOneCall(t *testing.T) {
	const limit = 256 << 10
	hub := newHub(t, codemode.Options{MaxMessage: limit, MaxResult: 2 << 20}, map[string]codemode.Server{
		"bad": {Command: os.Args[0], Env: map[string]string{misbehaveEnv: "stdio"},
			Allow: []string{"pid", "text", "hold", "garbage"}},
	})
	checkBadAnswers(t, hub, limit, true)
}

// TestBadAnswersFailOneCallHTTP: the same over Streamable HTTP, with
// answers as JSON bodies and as event streams.
func TestBadAnswersFailOneCallHTTP(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			const limit = 256 << 10
			srv := misbehaving(nil)
			h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
				&sdk.StreamableHTTPOptions{JSONResponse: jsonResponse})
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(rewritingWriter{w}, r)
			}))
			t.Cleanup(ts.Close)
			hub := newHub(t, codemode.Options{MaxMessage: limit, MaxResult: 2 << 20}, map[string]codemode.Server{
				"bad": {URL: ts.URL, Allow: []string{"pid", "text", "hold"}},
			})
			checkBadAnswers(t, hub, limit, false)
		})
	}
}

// rewritingWriter rewrites what an HTTP handler writes, as serverOut does.
type rewritingWriter struct{ http.ResponseWriter }

func (w rewritingWriter) Write(p []byte) (int, error) {
	q := rewrite(p)
	if len(q) != len(p) {
		w.Header().Del("Content-Length")
	}
	_, err := w.ResponseWriter.Write(q)
	return len(p), err
}

func (w rewritingWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func checkBadAnswers(t *testing.T, hub *codemode.Hub, limit int, lines bool) {
	ctx := t.Context()
	c, _ := hub.ForRun(ctx, "run-1")
	pid := func() string {
		t.Helper()
		res, err := call(t, c, ctx, "bad", "pid", map[string]any{})
		if err != nil {
			t.Fatalf("pid: %v", err)
		}
		return text(res)
	}
	first := pid()

	// Another run's call is in flight on the same connection throughout.
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	other, _ := hub.ForRun(ctx, "run-2")
	held := make(chan error, 1)
	go func() {
		res, err := call(t, other, ctx, "bad", "hold", map[string]any{"started": started, "release": release})
		if err == nil && text(res) != "released" {
			err = fmt.Errorf("hold answered %v", res)
		}
		held <- err
	}()
	mcptest.Eventually(t, 60*time.Second, "the other run's call to start", func() bool { _, err := os.Stat(started); return err == nil })

	for _, tc := range []struct {
		name string
		args map[string]any
		want string // in the error; "": the call succeeds
	}{
		{"under the limit", map[string]any{"text": "fits", "bytes": limit / 2}, ""},
		{"past the limit", map[string]any{"text": "big", "bytes": limit + 1}, "past the limit of 256 KiB (max_tool_message)"},
		{"past the limit, id last", map[string]any{"text": markLate, "bytes": 2 * limit}, "past the limit of 256 KiB"},
		{"cut in half", map[string]any{"text": markCut}, "a message pyrun cannot read"},
		{"wrong shape", map[string]any{"text": markShape}, "a result pyrun cannot read"},
		{"id last, fits", map[string]any{"text": markLate}, ""},
	} {
		res, err := call(t, c, ctx, "bad", "text", tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && !strings.HasPrefix(text(res), fmt.Sprint(tc.args["text"])):
			t.Errorf("%s: answered %.200s", tc.name, text(res))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
	if lines {
		res, err := call(t, c, ctx, "bad", "garbage", map[string]any{"text": "", "bytes": limit + 1})
		if err != nil || text(res) != "after garbage" {
			t.Errorf("garbage: %v %v", res, err)
		}
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mcptest.Receive(t, held, 30*time.Second, "the other run's call did not end"); err != nil {
		t.Errorf("the other run's call: %v", err)
	}
	if got := pid(); got != first {
		t.Errorf("the server's process was %s, now %s: the connection was made again", first, got)
	}
	var refused map[string]int64
	for _, s := range hub.Stats() {
		if s.Server == "bad" {
			refused = s.Refused
		}
	}
	wantLarge, wantBroken := int64(2), int64(1)
	if lines {
		wantLarge, wantBroken = 4, 3
	}
	if refused[codemode.RefusedTooLarge] != wantLarge || refused[codemode.RefusedMalformed] != wantBroken {
		t.Errorf("refused %v, want %d too-large, %d malformed", refused, wantLarge, wantBroken)
	}
}

// TestServerStderr: what a stdio server writes to its stderr (here its
// secret) is not in pyrun's log at info level; at debug level it is,
// escaped, each line cut, and at most 64 KiB of it.
func TestServerStderr(t *testing.T) {
	for _, level := range []hclog.Level{hclog.Info, hclog.Debug} {
		t.Run(level.String(), func(t *testing.T) {
			var logged syncbuf.Buffer
			hub := codemode.New(codemode.Options{}, "test", hclog.New(&hclog.LoggerOptions{Output: &logged, Level: level}))
			hub.Configure(map[string]codemode.Server{
				"bad": {Command: os.Args[0], Allow: []string{"pid"},
					Env: map[string]string{misbehaveEnv: "stdio", "SECRET_TOKEN": "tok-5ec12e7", "STDERR_FLOOD": "500"}},
			})
			c, _ := hub.ForRun(t.Context(), "run-1")
			if _, err := call(t, c, t.Context(), "bad", "pid", map[string]any{}); err != nil {
				t.Fatal(err)
			}
			hub.Close() // the server's stderr is read to its end
			log := logged.String()
			secret := strings.Contains(log, "tok-5ec12e7")
			switch {
			case level == hclog.Info && secret:
				t.Errorf("the server's stderr is in the log at info level:\n%.2000s", log)
			case level == hclog.Debug && !secret:
				t.Errorf("the server's stderr is not in the log at debug level:\n%.2000s", log)
			}
			if strings.ContainsAny(log, "\x1b\u202e") {
				t.Errorf("the log holds the server's control characters raw")
			}
			if len(log) > 100<<10 {
				t.Errorf("%d bytes logged for 1 MB of stderr", len(log))
			}
			if level == hclog.Debug && (!strings.Contains(log, `red\u202e`) || !strings.Contains(log, "the rest is not logged")) {
				t.Errorf("debug log:\n%.3000s", log)
			}
		})
	}
}

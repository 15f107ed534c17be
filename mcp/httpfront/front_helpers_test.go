package httpfront_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/httpfront"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: t.Output()})
}

// front is pyrun's MCP server behind an httpfront.Handler on a loopback
// port, with /metrics and /healthz.
type front struct {
	srv  *mcp.Server
	h    *httpfront.Handler
	base string // http://127.0.0.1:port
	addr string
}

// startFront serves r's calls; ho.Stats defaults to one idle worker.
func startFront(t *testing.T, r mcp.Runner, mo mcp.Options, ho httpfront.Options) *front {
	t.Helper()
	if ho.Stats == nil {
		ho.Stats = func() supervisor.Stats { return supervisor.Stats{Workers: 1, Ready: 1} }
	}
	srv := mcp.New(r, mo, testLogger(t))
	h := srv.HTTPHandler(mcp.HTTPOptions{Options: ho, Metrics: mcp.NewMetrics("test", ho.Stats)})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &front{srv: srv, h: h, base: ts.URL, addr: ts.Listener.Addr().String()}
}

// sessionRevision is the revision of the sessions these tests open
// (Mcp-Session-Id, DELETE): 2026-07-28 has none.
const sessionRevision = "2025-11-25"

// connect opens an MCP session of revision ("": the SDK's latest) over
// transport, closed with the test.
func connect(t *testing.T, transport sdk.Transport, revision string) *sdk.ClientSession {
	t.Helper()
	// Not t.Context(): it is cancelled before the cleanups run, and a
	// client closed after it cannot say goodbye (DELETE), which leaves the
	// session's GET stream to hold the test server's Close for 5s.
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "httpfront-test", Version: "test"}, nil).
		Connect(context.WithoutCancel(t.Context()), transport, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callCode(ctx context.Context, cs *sdk.ClientSession, code string) (*sdk.CallToolResult, error) {
	return cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.ToolName, Arguments: map[string]any{"python_code": code}})
}

// metrics scrapes /metrics into series -> value.
func (f *front) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(f.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return mcptest.ParseMetrics(t, resp.Body)
}

// front is f for mcptest's scenarios.
func (f *front) front() mcptest.Front { return mcptest.Front{Base: f.base, Metrics: f.metrics} }

// waitMetric polls /metrics until series satisfies ok, for at most 20s.
func (f *front) waitMetric(t *testing.T, series string, ok func(float64) bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		v := f.metrics(t)[series]
		if ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after 20s", series, v)
		}
		time.Sleep(20 * time.Millisecond) // polling what pyrun exposes, not synchronising
	}
}

// health asks /healthz.
func (f *front) health(t *testing.T) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(f.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	return resp.StatusCode, body
}

const initBody = mcptest.InitBody

var (
	callBody    = mcptest.CallBody
	post        = mcptest.Post
	openSession = mcptest.OpenSession
)

// bearer is an HTTP client that sends token.
func bearer(token string) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// tokens is access control as pyrun's: a token NAME-token is client NAME.
func tokens(next http.Handler) http.Handler {
	return auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := strings.CutSuffix(token, "-token")
		if !ok || user == "" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)(next)
}

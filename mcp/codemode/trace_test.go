package codemode_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrun/pyrun/mcp/codemode"
)

// metaRecorder is an MCP server (the go-sdk's, over Streamable HTTP) whose
// one tool, echo, keeps the _meta of each call it gets.
type metaRecorder struct {
	mu    sync.Mutex
	metas []map[string]any
}

func newMetaRecorder(t *testing.T) (*metaRecorder, string) {
	r := &metaRecorder{}
	srv := sdk.NewServer(&sdk.Implementation{Name: "recorder", Version: "1"}, nil)
	type args struct{}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Answers."}, func(ctx context.Context, req *sdk.CallToolRequest, _ args) (*sdk.CallToolResult, map[string]int, error) {
		r.mu.Lock()
		r.metas = append(r.metas, req.Params.Meta)
		r.mu.Unlock()
		return nil, map[string]int{"ok": 1}, nil
	})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close) // after the hub closes: its event stream holds the server open
	return r, hs.URL
}

func (r *metaRecorder) last(t *testing.T) map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.metas) == 0 {
		t.Fatal("the server got no call")
	}
	return r.metas[len(r.metas)-1]
}

// The client's trace context, as pyrun's front end reads it from a call's
// _meta (W3C Trace Context).
const (
	clientTrace  = "0af7651916cd43dd8448eb211c80319c"
	clientSpan   = "b7ad6b7169203331"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
	clientState  = "congo=t61rcWkgMzE"
)

func clientContext(t *testing.T) context.Context {
	return propagation.TraceContext{}.Extract(t.Context(), propagation.MapCarrier{"traceparent": clientParent, "tracestate": clientState})
}

// parent reads the span context a traceparent in meta names.
func parent(t *testing.T, meta map[string]any) trace.SpanContext {
	t.Helper()
	tp, _ := meta["traceparent"].(string)
	ts, _ := meta["tracestate"].(string)
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp, "tracestate": ts}))
	if !sc.IsValid() {
		t.Fatalf("the upstream call's _meta has no valid traceparent: %v", meta)
	}
	return sc
}

// TestUpstreamCallCarriesTrace: a run's tool call to another MCP server
// carries the run's trace in its _meta (SEP-414): without pyrun recording
// spans, the client's span as it came; with, a span of the tool call's own,
// a child of the run's span, which pyrun records. An untraced run sends no
// trace context.
func TestUpstreamCallCarriesTrace(t *testing.T) {
	rec, url := newMetaRecorder(t)
	hub := newHub(t, codemode.Options{}, map[string]codemode.Server{"rec": {URL: url, Allow: []string{"echo"}}})

	t.Run("untraced", func(t *testing.T) {
		c, _ := hub.ForRun(t.Context(), "run-plain")
		if _, err := call(t, c, t.Context(), "rec", "echo", map[string]any{}); err != nil {
			t.Fatal(err)
		}
		if meta := rec.last(t); meta["traceparent"] != nil || meta["tracestate"] != nil {
			t.Errorf("an untraced run's call has trace context: %v", meta)
		}
	})

	t.Run("client's span", func(t *testing.T) {
		ctx := clientContext(t)
		c, _ := hub.ForRun(ctx, "run-client")
		if _, err := call(t, c, t.Context(), "rec", "echo", map[string]any{}); err != nil {
			t.Fatal(err)
		}
		meta := rec.last(t)
		if meta["traceparent"] != clientParent || meta["tracestate"] != clientState {
			t.Errorf("upstream _meta %v, want traceparent %s and tracestate %s", meta, clientParent, clientState)
		}
	})

	t.Run("recorded span", func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		ctx, run := tp.Tracer("test").Start(clientContext(t), "tools/call run_python_code")
		c, _ := hub.ForRun(ctx, "run-recorded")
		// The supervisor's context for the call does not carry the run's
		// span: the caller has it from ForRun.
		if _, err := call(t, c, t.Context(), "rec", "echo", map[string]any{}); err != nil {
			t.Fatal(err)
		}
		run.End()
		sc := parent(t, rec.last(t))
		if sc.TraceID().String() != clientTrace {
			t.Errorf("upstream trace %s, want the client's %s", sc.TraceID(), clientTrace)
		}
		var child sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Name() == "tools/call echo" {
				child = s
			}
		}
		if child == nil {
			t.Fatalf("no span for the tool call among %d", len(spans.Ended()))
		}
		if child.SpanContext().SpanID() != sc.SpanID() {
			t.Errorf("upstream parent span %s, want the tool call's span %s", sc.SpanID(), child.SpanContext().SpanID())
		}
		if child.Parent().SpanID() != run.SpanContext().SpanID() || child.SpanKind() != trace.SpanKindClient {
			t.Errorf("the tool call's span: parent %s kind %s, want the run's %s and client", child.Parent().SpanID(), child.SpanKind(), run.SpanContext().SpanID())
		}
		attrs := map[string]string{}
		for _, a := range child.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs["pyrun.status"] != codemode.StatusOK || attrs["pyrun.mcp_server"] != "rec" || attrs["gen_ai.tool.name"] != "echo" {
			t.Errorf("the tool call's span attributes: %v", attrs)
		}
	})
}

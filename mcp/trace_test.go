package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

const (
	clientTrace  = "0af7651916cd43dd8448eb211c80319c"
	clientSpan   = "b7ad6b7169203331"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// tracedServer is a server whose pool answers every call with res and
// sends each call's Job to jobs.
func tracedServer(t *testing.T, res supervisor.Result, tracer trace.Tracer) (*sdk.ClientSession, chan supervisor.Job) {
	t.Helper()
	jobs := make(chan supervisor.Job, 8)
	s := New(mcptest.Func(func(_ context.Context, job supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
		jobs <- job
		return res, nil
	}), Options{Version: "test"}, testLogger(t))
	if tracer != nil {
		s.UseTracer(tracer)
	}
	serverT, clientT := sdk.NewInMemoryTransports()
	ss, err := s.sdk.Connect(t.Context(), serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(), clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, jobs
}

func callWithMeta(t *testing.T, cs *sdk.ClientSession, jobs chan supervisor.Job, meta sdk.Meta) supervisor.Job {
	t.Helper()
	if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"python_code": "1"}, Meta: meta}); err != nil {
		t.Fatal(err)
	}
	return <-jobs
}

// Without a tracer, a call's Job names the client's trace and span from
// _meta.traceparent (SEP-414), for the call's log line; a traceparent that
// is not W3C Trace Context, or none, leaves the call untraced.
func TestCallCarriesClientTrace(t *testing.T) {
	cs, jobs := tracedServer(t, supervisor.Result{Status: supervisor.StatusSuccess}, nil)
	job := callWithMeta(t, cs, jobs, sdk.Meta{"traceparent": clientParent, "tracestate": "congo=t61rcWkgMzE"})
	if job.TraceID != clientTrace || job.SpanID != clientSpan {
		t.Errorf("job trace %q span %q, want the client's %s and %s", job.TraceID, job.SpanID, clientTrace, clientSpan)
	}
	for _, meta := range []sdk.Meta{nil, {"traceparent": "00-not-a-trace-01"}, {"traceparent": 42},
		{"traceparent": "00-00000000000000000000000000000000-" + clientSpan + "-01"}} {
		if job := callWithMeta(t, cs, jobs, meta); job.TraceID != "" || job.SpanID != "" {
			t.Errorf("_meta %v: job trace %q span %q, want none", meta, job.TraceID, job.SpanID)
		}
	}
}

// With a tracer, pyrun records a server span for each call, a child of the
// client's span, named after the tool, with the call's status and worker;
// the Job names that span. A call that came untraced gets a trace of its
// own.
func TestCallSpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cs, jobs := tracedServer(t, supervisor.Result{Status: supervisor.StatusRunError, Worker: "worker-7"}, tp.Tracer("test"))
	job := callWithMeta(t, cs, jobs, sdk.Meta{"traceparent": clientParent})
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	span := ended[0]
	if span.Name() != "tools/call "+ToolName || span.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %s, want tools/call %s, server", span.Name(), span.SpanKind(), ToolName)
	}
	if span.SpanContext().TraceID().String() != clientTrace || span.Parent().SpanID().String() != clientSpan || !span.Parent().IsRemote() {
		t.Errorf("span trace %s parent %s, want the client's %s and %s", span.SpanContext().TraceID(), span.Parent().SpanID(), clientTrace, clientSpan)
	}
	if job.TraceID != clientTrace || job.SpanID != span.SpanContext().SpanID().String() {
		t.Errorf("job trace %q span %q, want %s and pyrun's span %s", job.TraceID, job.SpanID, clientTrace, span.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range span.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"gen_ai.tool.name": ToolName, "pyrun.status": "run-error", "pyrun.worker": "worker-7",
		"pyrun.call.id": job.ID, "error.type": "tool_error", "mcp.method.name": "tools/call"} {
		if attrs[k] != want {
			t.Errorf("span attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	if attrs["mcp.session.id"] == "" {
		t.Errorf("span has no mcp.session.id: %v", attrs)
	}

	job = callWithMeta(t, cs, jobs, nil)
	if len(job.TraceID) != 32 || job.TraceID == clientTrace || len(spans.Ended()) != 2 || spans.Ended()[1].Parent().IsValid() {
		t.Errorf("an untraced call with a tracer: job trace %q, want a root span of its own", job.TraceID)
	}
}

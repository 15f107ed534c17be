package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrun/pyrun/supervisor"
)

// Trace context (docs/operations.md, Tracing). A client that traces its
// calls sends W3C Trace Context in the request's _meta, under the keys
// MCP reserves for it (SEP-414): traceparent and tracestate. pyrun reads
// them with OpenTelemetry's W3C propagator, which checks their format, so
// a malformed value is ignored rather than logged. The call's log line
// names the trace and the span; with a tracer (UseTracer, --otlp-endpoint)
// pyrun also records a span of its own for the call, a child of the
// client's, and code mode's calls to other MCP servers are its children.
// Without one no span is made: the call's span is the client's, carried
// as it came.

// traceKeys are the _meta keys of W3C Trace Context that pyrun reads.
// baggage is not read: nothing of pyrun's depends on it.
var traceKeys = [...]string{"traceparent", "tracestate"}

// UseTracer records a span for each call of a run tool with t; nil (the
// default): none.
func (s *Server) UseTracer(t trace.Tracer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tracer = t
}

func (s *Server) callTracer() trace.Tracer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tracer
}

// startSpan returns ctx carrying the call's span: a new one, the child of
// the trace context in req's _meta (or a root), when pyrun has a tracer;
// else the client's span from _meta, not recording. A call that came with
// no trace context and meets no tracer has a span context that is not
// valid.
func (s *Server) startSpan(ctx context.Context, req *sdk.CallToolRequest, tool string) (context.Context, trace.Span) {
	if req != nil && req.Params != nil && len(req.Params.Meta) > 0 {
		carrier := propagation.MapCarrier{}
		for _, k := range traceKeys {
			if v, ok := req.Params.Meta[k].(string); ok {
				carrier[k] = v
			}
		}
		if len(carrier) > 0 {
			ctx = propagation.TraceContext{}.Extract(ctx, carrier)
		}
	}
	tracer := s.callTracer()
	if tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracer.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool),
			attribute.String("mcp.session.id", s.sessionName(req.Session)),
		))
}

// traceIDs are the span's trace and span ids for a Job; "" when the span
// context is not valid (the call is not traced).
func traceIDs(span trace.Span) (traceID, spanID string) {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// endSpan records how the call went on its span, when pyrun records it,
// and ends it. A call whose result is an error (a Python exception, a
// timeout, a refusal) has the span status Error, as OpenTelemetry's MCP
// conventions have a tool result with isError.
func endSpan(ctx context.Context, span trace.Span, job supervisor.Job, out *sdk.CallToolResult, res supervisor.Result) {
	if !span.IsRecording() {
		return
	}
	defer span.End()
	status := string(res.Status)
	switch {
	case ctx.Err() != nil:
		status = "cancelled"
	case status == "":
		status = "refused" // it did not run: bad arguments, a full queue
	}
	span.SetAttributes(attribute.String("pyrun.status", status), attribute.String("pyrun.worker", res.Worker),
		attribute.String("pyrun.call.id", job.ID))
	if out != nil && out.IsError {
		span.SetAttributes(attribute.String("error.type", "tool_error"))
		span.SetStatus(codes.Error, status)
	}
}

package codemode

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context of code mode's calls (docs/operations.md, Tracing). A
// run's tool call to another MCP server carries the trace it belongs to,
// in its _meta as MCP reserves the keys for it (SEP-414): with pyrun
// recording spans, the tool call's own span, a child of the run's; without,
// the run's span as its client sent it. A run that is not traced sends no
// _meta.

// startSpan returns ctx carrying the tool call's span: a new child of the
// run's span when that one is recorded, else the run's span itself.
func (c *Caller) startSpan(ctx context.Context, server, toolName string) (context.Context, trace.Span) {
	if c.span == nil || !c.span.IsRecording() {
		if c.span != nil {
			ctx = trace.ContextWithSpan(ctx, c.span)
		}
		return ctx, c.span
	}
	// The names are the code's: clipped, as in the log line.
	tool := clipName(toolName)
	ctx = trace.ContextWithSpan(ctx, c.span)
	return c.span.TracerProvider().Tracer("github.com/pyrun/pyrun/mcp/codemode").Start(ctx, "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool),
			attribute.String("pyrun.mcp_server", clipName(server)),
			attribute.String("pyrun.run", c.run),
		))
}

// endSpan records the tool call's status on its span, when it is one
// pyrun records (not the run's, which its own caller ends), and ends it.
func endSpan(span trace.Span, status string, err error) {
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("pyrun.status", status))
	switch {
	case err != nil:
		span.SetAttributes(attribute.String("error.type", status))
		span.SetStatus(codes.Error, err.Error())
	case status == StatusToolError:
		span.SetAttributes(attribute.String("error.type", "tool_error"))
		span.SetStatus(codes.Error, status)
	}
	span.End()
}

// traceMeta is the _meta of a tool call made in ctx: the trace context of
// its span, or nil when it has none.
func traceMeta(ctx context.Context) sdk.Meta {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	meta := sdk.Meta{}
	for k, v := range carrier {
		meta[k] = v
	}
	return meta
}

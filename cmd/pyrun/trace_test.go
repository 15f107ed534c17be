package main

// Tracing end to end (docs/operations.md, Tracing): a traceparent in a
// call's _meta reaches the call's log line, and with --otlp-endpoint pyrun
// exports its span of the call to an OTLP/HTTP collector, here a test
// receiver that decodes what it gets as a collector would.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

const (
	clientTrace  = "0af7651916cd43dd8448eb211c80319c"
	clientSpan   = "b7ad6b7169203331"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// otlpReceiver is an OTLP/HTTP collector's traces endpoint: it keeps the
// spans of every export request it decodes.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
	errs     []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 16<<20))
	var export coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &export)
	}
	if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.errs = append(r.errs, req.URL.Path+" "+req.Header.Get("Content-Type")+" "+fmt.Sprint(err))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range export.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// callLogLine is pyrun's log line of its one call so far ("call").
func callLogLine(t *testing.T, s *server) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.log.waitFor(ctx, "the call's log line", func(c map[string]int) bool { return c["call"] > 0 }); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(s.log.tail()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == "call" {
			return rec
		}
	}
	t.Fatalf("no call line in:\n%s", s.log.tail())
	return nil
}

// tracedCall runs a call whose _meta carries the client's traceparent.
func tracedCall(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	res, err := s.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": "6*7"},
		Meta: sdk.Meta{"traceparent": clientParent, "tracestate": "congo=t61rcWkgMzE"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkResult(res); err != nil || res.IsError {
		t.Fatalf("the traced call: %v %v", err, res.Content)
	}
}

// With --otlp-endpoint, pyrun exports a span of the call, a child of the
// client's span, and the call's log line names that span.
func TestTraceExported(t *testing.T) {
	needBinary(t)
	recv := newOTLPReceiver(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, "--workers", "1", "--otlp-endpoint", recv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tracedCall(t, s)
	line := callLogLine(t, s)
	// pyrun exports what is left when it exits, once its client hangs up.
	if err := s.session.Close(); err != nil {
		t.Fatalf("pyrun stdio did not exit cleanly: %v\n%s", err, s.log.tail())
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.errs) > 0 {
		t.Fatalf("the receiver refused exports: %v", recv.errs)
	}
	var span *tracepb.Span
	for _, sp := range recv.spans {
		if sp.Name == "tools/call run_python_code" {
			span = sp
		}
	}
	if span == nil {
		t.Fatalf("no span of the call among %d exported\n%s", len(recv.spans), s.log.tail())
	}
	if got := hex.EncodeToString(span.TraceId); got != clientTrace {
		t.Errorf("span trace %s, want the client's %s", got, clientTrace)
	}
	if got := hex.EncodeToString(span.ParentSpanId); got != clientSpan {
		t.Errorf("span parent %s, want the client's span %s", got, clientSpan)
	}
	if span.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span kind %s, want server", span.Kind)
	}
	if line["trace_id"] != clientTrace || line["span_id"] != hex.EncodeToString(span.SpanId) {
		t.Errorf("call line trace_id %v span_id %v, want %s and the exported span's %x", line["trace_id"], line["span_id"], clientTrace, span.SpanId)
	}
	attrs := map[string]string{}
	for _, kv := range span.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["pyrun.status"] != "success" || attrs["pyrun.worker"] != line["worker"] || attrs["gen_ai.tool.name"] != "run_python_code" {
		t.Errorf("span attributes %v, want status success and the call line's worker %v", attrs, line["worker"])
	}
}

// Without --otlp-endpoint, nothing is exported, even with the OTLP
// environment variables pointing at a collector (pyrun sets up no SDK),
// and the call's log line names the client's span as it came.
func TestTraceOffByDefault(t *testing.T) {
	needBinary(t)
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL+"/v1/traces")
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, "--workers", "1")
	if err != nil {
		t.Fatal(err)
	}
	tracedCall(t, s)
	line := callLogLine(t, s)
	if err := s.session.Close(); err != nil {
		t.Fatalf("pyrun stdio did not exit cleanly: %v\n%s", err, s.log.tail())
	}
	if line["trace_id"] != clientTrace || line["span_id"] != clientSpan {
		t.Errorf("call line trace_id %v span_id %v, want the client's %s and %s", line["trace_id"], line["span_id"], clientTrace, clientSpan)
	}
	if strings.Contains(s.log.tail(), "exporting spans") {
		t.Errorf("pyrun set up an exporter without --otlp-endpoint:\n%s", s.log.tail())
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.requests != 0 {
		t.Errorf("the collector got %d requests without --otlp-endpoint", recv.requests)
	}
}

// --otlp-endpoint takes an http or https URL; one without a path gets the
// traces path; without the flag there is no tracer, and no SDK.
func TestOTLPEndpointOption(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"https://collector.example/", "https://collector.example/v1/traces"},
		{"http://127.0.0.1:4318/custom/traces", "http://127.0.0.1:4318/custom/traces"},
	} {
		o, _, err := loadOptions("stdio", []string{"--otlp-endpoint", tc.flag})
		if err != nil {
			t.Fatalf("%s: %v", tc.flag, err)
		}
		if got, _ := o.otlpURL(); got != tc.want {
			t.Errorf("%s: endpoint %s, want %s", tc.flag, got, tc.want)
		}
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://collector:4317", "http://", "::"} {
		if _, _, err := loadOptions("stdio", []string{"--otlp-endpoint", bad}); err == nil || !strings.Contains(err.Error(), "otlp-endpoint") {
			t.Errorf("%q: error %v, want one naming otlp-endpoint", bad, err)
		}
	}
	o, _, err := loadOptions("stdio", nil)
	if err != nil {
		t.Fatal(err)
	}
	tracer, stop, err := startTracing(o, hclog.NewNullLogger())
	if err != nil || tracer != nil {
		t.Errorf("without --otlp-endpoint: tracer %v, error %v; want none", tracer, err)
	}
	stop()
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
		t.Error("a tracer provider of the SDK is set without --otlp-endpoint")
	}
}

// With --otlp-endpoint, a code-mode tool call is a span of its own, a
// child of the call's, and the MCP server it reaches gets that span in
// its _meta.traceparent, so that its spans join the client's trace.
func TestTraceCodeMode(t *testing.T) {
	needBinary(t)
	recv := newOTLPReceiver(t)
	var (
		mu    sync.Mutex
		metas []map[string]any
	)
	upstream := sdk.NewServer(&sdk.Implementation{Name: "recorder", Version: "1"}, nil)
	type args struct {
		X int `json:"x"`
	}
	sdk.AddTool(upstream, &sdk.Tool{Name: "echo", Description: "Answers x."}, func(_ context.Context, req *sdk.CallToolRequest, a args) (*sdk.CallToolResult, map[string]int, error) {
		mu.Lock()
		metas = append(metas, req.Params.Meta)
		mu.Unlock()
		return nil, map[string]int{"x": a.X}, nil
	})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return upstream }, nil))
	t.Cleanup(hs.Close) // after pyrun: its event stream holds the server open
	config := codeModeConfig(t, map[string]any{"rec": map[string]any{"url": hs.URL, "allow": []string{"echo"}}}, nil)

	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, "--config", config, "--workers", "1", "--otlp-endpoint", recv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Meta: sdk.Meta{"traceparent": clientParent},
		Arguments: map[string]any{"python_code": "import mcp_tools\n(await mcp_tools.rec.echo(x=7))"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := checkResult(res); err != nil || r.isError {
		t.Fatalf("the code-mode call: %v %s", err, r.text)
	}
	if err := s.session.Close(); err != nil {
		t.Fatalf("pyrun stdio did not exit cleanly: %v\n%s", err, s.log.tail())
	}

	byName := map[string]*tracepb.Span{}
	recv.mu.Lock()
	for _, sp := range recv.spans {
		byName[sp.Name] = sp
	}
	recv.mu.Unlock()
	call, tool := byName["tools/call run_python_code"], byName["tools/call echo"]
	if call == nil || tool == nil {
		t.Fatalf("exported spans %v, want the call's and the tool call's\n%s", byName, s.log.tail())
	}
	if hex.EncodeToString(tool.TraceId) != clientTrace || !bytes.Equal(tool.ParentSpanId, call.SpanId) || tool.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("the tool call's span: trace %x parent %x kind %s, want %s, the call's span %x, client", tool.TraceId, tool.ParentSpanId, tool.Kind, clientTrace, call.SpanId)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(metas) != 1 {
		t.Fatalf("the MCP server got %d calls, want 1", len(metas))
	}
	want := "00-" + clientTrace + "-" + hex.EncodeToString(tool.SpanId) + "-01"
	if metas[0]["traceparent"] != want {
		t.Errorf("the MCP server's _meta %v, want traceparent %s (the tool call's span)", metas[0], want)
	}
}

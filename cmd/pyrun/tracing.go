package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (docs/operations.md, Tracing): with --otlp-endpoint, pyrun
// records a span of each run tool call (mcp/trace.go) and of each code-mode
// tool call, and exports them with OpenTelemetry's SDK over OTLP/HTTP.
// Without it no SDK is set up at all: no tracer provider, no exporter, and
// nothing read from the OTEL_ environment variables.

// tracesPath is where an OTLP/HTTP collector takes spans, added to an
// endpoint given without a path (as OTEL_EXPORTER_OTLP_ENDPOINT is read).
const tracesPath = "/v1/traces"

// tracingStopTimeout bounds the export of the spans still buffered at exit.
const tracingStopTimeout = 5 * time.Second

// otlpURL is --otlp-endpoint as the exporter takes it; "" without one.
func (o *options) otlpURL() (string, error) {
	if o.otlpEndpoint == "" {
		return "", nil
	}
	u, err := url.Parse(o.otlpEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("otlp-endpoint must be an http:// or https:// URL, not %q", o.otlpEndpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	return u.String(), nil
}

// startTracing returns the tracer of pyrun's spans and a stop that exports
// what is left and shuts the exporter down; with no --otlp-endpoint, a nil
// tracer and a stop that does nothing.
func startTracing(o *options, log hclog.Logger) (trace.Tracer, func(), error) {
	endpoint, err := o.otlpURL()
	if err != nil || endpoint == "" {
		return nil, func() {}, err
	}
	// An export that fails is logged as pyrun's, not printed by the SDK's
	// default handler in a format of its own.
	exportLog := log.Named("tracing")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { exportLog.Warn("exporting spans", "error", err) }))
	// The exporter reads the rest of its settings (headers, timeout, TLS
	// files) from the OTEL_EXPORTER_OTLP_ variables; the flag's URL wins
	// over theirs. New does not connect: a collector that is down costs
	// dropped spans and a warning, never a call.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("otlp-endpoint: %w", err)
	}
	res, err := resource.New(context.Background(),
		resource.WithAttributes(attribute.String("service.name", "pyrun"), attribute.String("service.version", version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil {
		exportLog.Warn("describing pyrun to the collector", "error", err)
	}
	// The default sampler: a call the client traced and sampled is
	// recorded, one it did not sample is not, and an untraced one starts a
	// sampled trace of its own.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	if u, err := url.Parse(endpoint); err == nil {
		log.Info("exporting spans", "endpoint", u.Redacted())
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingStopTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			exportLog.Warn("exporting the last spans", "error", err)
		}
	}
	return tp.Tracer("github.com/pyrun/pyrun"), stop, nil
}

package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrun/pyrun/mcp/argtext"
)

// Caller makes the tool calls of one run; it is a supervisor.ToolCaller.
// Its Call is safe for concurrent use.
type Caller struct {
	hub   *Hub
	run   string
	opts  Options
	calls atomic.Int64
	slots chan struct{} // one per call in progress
	// span is the run's span (trace.go): the parent of its tool calls'.
	span trace.Span
}

func newCaller(h *Hub, run string, opts Options, span trace.Span) *Caller {
	return &Caller{hub: h, run: run, opts: opts, slots: make(chan struct{}, opts.Concurrency), span: span}
}

// Statuses of a tool call, in its log line and metrics.
const (
	StatusOK          = "ok"
	StatusToolError   = "tool-error"        // the tool said isError
	StatusInvalid     = "invalid-arguments" // refused before the call: schema
	StatusNotAllowed  = "not-allowed"       // no such server or tool, or not in allow
	StatusLimit       = "limit"             // max_tool_calls reached
	StatusTimeout     = "timeout"           // the server's timeout
	StatusCancelled   = "cancelled"         // the run ended or was stopped
	StatusUnavailable = "unavailable"       // the server is down or connecting
	StatusFailed      = "failed"            // the connection failed during the call
	StatusBadAnswer   = "bad-answer"        // the server's answer was too large or broken (max_tool_message)
)

// Statuses lists every status, for metrics.
var Statuses = []string{StatusOK, StatusToolError, StatusInvalid, StatusNotAllowed, StatusLimit,
	StatusTimeout, StatusCancelled, StatusUnavailable, StatusFailed, StatusBadAnswer}

// Call makes one tool call: checks it against the allow list, the run's
// limits and the tool's input schema, calls the server and returns the
// tool's result (MCP's CallToolResult as JSON, capped at MaxResult). An
// error is what the code raises as mcp_tools.ToolError.
func (c *Caller) Call(ctx context.Context, server, toolName string, args json.RawMessage) (json.RawMessage, error) {
	began := time.Now()
	ctx, span := c.startSpan(ctx, server, toolName)
	res, status, label, err := c.call(ctx, server, toolName, args)
	d := time.Since(began)
	endSpan(span, status, err)
	log := c.hub.log
	// The names are the code's: clipped, so that a log line stays a line.
	logServer, logTool := clipName(server), clipName(toolName)
	if err != nil {
		log.Info("tool call", "run", c.run, "server", logServer, "tool", logTool, "duration", d.Round(time.Microsecond),
			"status", status, "error", err.Error())
	} else {
		log.Info("tool call", "run", c.run, "server", logServer, "tool", logTool, "duration", d.Round(time.Microsecond),
			"status", status, "result_bytes", len(res))
	}
	if log.IsDebug() {
		log.Debug("tool call arguments", "run", c.run, "server", logServer, "tool", logTool, "arguments", string(args))
	}
	c.hub.mu.RLock()
	observe := c.hub.observe
	c.hub.mu.RUnlock()
	if observe != nil {
		observe(label, status, d)
	}
	return res, err
}

// OtherServer is the server Hub.Observe reports for a call that named no
// configured server: metric labels come from the configuration only, never
// from the code (which could name a new server at every call).
const OtherServer = "other"

// maxLoggedName bounds a server or tool name as the log shows it.
const maxLoggedName = 128

func clipName(s string) string {
	if len(s) <= maxLoggedName {
		return s
	}
	return cut(s, maxLoggedName) + "..."
}

// call makes the tool call; label is server when that names a configured
// server, else OtherServer.
func (c *Caller) call(ctx context.Context, server, toolName string, args json.RawMessage) (res json.RawMessage, status, label string, err error) {
	u := c.hub.acquire(server)
	if u == nil {
		label = OtherServer
	} else {
		label = server
		defer u.release()
	}
	res, status, err = c.callOn(ctx, u, server, toolName, args)
	return res, status, label, err
}

func (c *Caller) callOn(ctx context.Context, u *upstream, server, toolName string, args json.RawMessage) (json.RawMessage, string, error) {
	if n := c.calls.Add(1); n > int64(c.opts.MaxCalls) {
		return nil, StatusLimit, fmt.Errorf("pyrun: this run reached its limit of %d tool calls (max_tool_calls)", c.opts.MaxCalls)
	}
	if u == nil {
		return nil, StatusNotAllowed, fmt.Errorf("pyrun: there is no MCP server %q (servers: %s)", clipName(server), c.hub.names())
	}
	if !u.cfg.allowed(toolName) {
		return nil, StatusNotAllowed, fmt.Errorf("pyrun: the tool %q of the MCP server %q is not allowed (its allow list in mcp_servers)", toolName, server)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, StatusCancelled, fmt.Errorf("pyrun: the run ended before the tool call could start")
	}
	defer func() { <-c.slots }()

	timeout := u.cfg.timeout()
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cs, err := u.waitSession(callCtx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, StatusCancelled, runEnded(ctx)
		}
		return nil, StatusUnavailable, fmt.Errorf("pyrun: %s: %w", server, err)
	}
	// Connected: the server has listed its tools.
	t := u.lookup(toolName)
	if t == nil {
		return nil, StatusNotAllowed, fmt.Errorf("pyrun: the MCP server %q does not offer the tool %q now", server, toolName)
	}
	if err := checkArgs(t, args); err != nil {
		return nil, StatusInvalid, fmt.Errorf("invalid arguments for %s.%s: %w", server, toolName, err)
	}
	c.hub.log.Debug("tool call started", "run", c.run, "server", server, "tool", toolName)
	res, err := cs.CallTool(callCtx, &sdk.CallToolParams{Name: toolName, Arguments: args, Meta: traceMeta(ctx)})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, StatusCancelled, runEnded(ctx)
	case callCtx.Err() != nil:
		return nil, StatusTimeout, fmt.Errorf("pyrun: %s.%s did not answer within %s (the server's timeout)", server, toolName, timeout)
	default:
		var wire *jsonrpc.Error
		if errors.As(err, &wire) && wire.Code == codeRefusedAnswer {
			return nil, StatusBadAnswer, errors.New(wire.Message)
		}
		if !errors.As(err, &wire) {
			// Not an answer from the server: the connection failed (a
			// crash, say), and a new one is made for the next call; or the
			// answer did not fit the call (a result that does not decode).
			if !u.broken(cs, err) {
				return nil, StatusBadAnswer, fmt.Errorf("pyrun: the MCP server %q answered with a result pyrun cannot read (%s); this call failed, the connection is kept",
					server, clipName(err.Error()))
			}
			return nil, StatusFailed, fmt.Errorf("pyrun: the MCP server %q failed during the call (%v); pyrun reconnects it", server, err)
		}
		return nil, StatusFailed, fmt.Errorf("the MCP server %q refused the call: %v", server, err)
	}
	out, err := capResult(res, c.opts.MaxResult)
	if err != nil {
		return nil, StatusFailed, fmt.Errorf("pyrun: the result of %s.%s: %w", server, toolName, err)
	}
	if res.IsError {
		return out, StatusToolError, nil
	}
	return out, StatusOK, nil
}

func runEnded(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errors.New("pyrun: the run reached its time limit during the tool call")
	}
	return errors.New("pyrun: the run was stopped during the tool call")
}

// checkArgs checks arguments against the tool's input schema before the
// server sees them.
func checkArgs(t *tool, args json.RawMessage) error {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return errors.New("the arguments must be an object of names to values")
	}
	if t.resolved == nil {
		return nil
	}
	if err := t.resolved.Validate(v); err != nil {
		if plain := argtext.Explain(v, t.resolved.Schema()); plain != nil {
			return plain
		}
		msg := err.Error()
		if len(msg) > 1000 {
			msg = cut(msg, 1000) + "..."
		}
		return errors.New(msg)
	}
	return nil
}

func (h *Hub) names() string {
	var names []string
	for _, u := range h.sorted() {
		names = append(names, u.name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// capResult encodes a result within max bytes, dropping what does not fit
// with a visible marker: structured content that does not fit is left out
// (the content blocks carry the same, by MCP's advice), text is cut, and
// blocks past the limit are replaced by a note.
func capResult(res *sdk.CallToolResult, max int) (json.RawMessage, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	if len(b) <= max {
		return b, nil
	}
	var r struct {
		Content           []map[string]any `json:"content"`
		StructuredContent json.RawMessage  `json:"structuredContent,omitempty"`
		IsError           bool             `json:"isError,omitempty"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	total := len(b)
	room := max - 256 // the envelope and the markers
	var kept []map[string]any
	note := func(what string) map[string]any {
		return map[string]any{"type": "text", "text": fmt.Sprintf(
			"[pyrun: %s: the result of %d bytes exceeded the limit of %d bytes (max_output)]", what, total, max)}
	}
	if len(r.StructuredContent) > room/2 {
		r.StructuredContent = nil
	} else {
		room -= len(r.StructuredContent)
	}
	for _, c := range r.Content {
		cb, _ := json.Marshal(c)
		if len(cb) <= room {
			kept = append(kept, c)
			room -= len(cb)
			continue
		}
		if text, ok := c["text"].(string); ok && c["type"] == "text" && room > 64 {
			kept = append(kept, map[string]any{"type": "text", "text": cut(text, room-64)})
		}
		kept = append(kept, note("cut here"))
		break
	}
	r.Content = kept
	out, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(out), nil
}

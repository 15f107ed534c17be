package supervisor

import (
	"encoding/json"
	"time"
)

// Job is one call to run.
type Job struct {
	// ID names the call in logs and in the worker protocol.
	ID   string
	Code string
	// Language is the engine the call is for (Engine.Name), for Pools;
	// "": Python.
	Language string
	// Globals is a JSON object of names to bind in the call's globals; empty
	// for none. The front end has checked that it is an object.
	Globals json.RawMessage
	// Timeout is the call's own limit; 0 or more than the pool's Timeout
	// means the pool's.
	Timeout time.Duration
	// Client names who asked (a token's name, a JWT's subject), and
	// Session the MCP session it came in, for logs.
	Client  string
	Session string
	// TraceID and SpanID name the call's span in a distributed trace, as
	// W3C Trace Context writes them (32 and 16 lowercase hex digits), for
	// its log line ("call"): the front end reads them from the request
	// (an MCP call's _meta.traceparent). "": the call is not traced, and
	// its line has neither.
	TraceID string
	SpanID  string
	// InSession is what a call in a session carries (package sessions);
	// the zero value: a stateless call.
	InSession SessionCall
	// Files are written into the working directory before the code runs;
	// the front end has checked their paths (CheckInputPath). nil: none.
	Files []InputFile
	// Tools runs the host calls the code makes (tool_call events); nil:
	// it can make none. Catalog describes them to the code, as JSON the
	// supervisor passes on unread; empty: none.
	Tools   ToolCaller
	Catalog json.RawMessage
}

// SessionCall is what a call in a session carries to the worker that
// holds the session (docs/sessions.md).
type SessionCall struct {
	// ID is the session's id, for logs.
	ID string
	// KeepOutput leaves /output/ as the worker's previous call left it;
	// false empties it before and after the call.
	KeepOutput bool
	// Namespace is the session namespace the call runs in on a worker
	// shared by several sessions of one client (--session-worker shared);
	// "": the worker's one state. Drop names namespaces of ended sessions
	// the worker forgets before the call; it names the call's own
	// namespace for the session's last call (end_session), which the
	// worker then forgets once the result is out, off the next call's
	// path (docs/protocol.md, Sessions).
	Namespace string
	Drop      []string
	// Last says the call ends its session (end_session): a shared
	// session worker forgets its namespace after it.
	Last bool
}

// LogTrace is args with the call's trace_id and span_id appended when it
// is traced, for its log line.
func (j Job) LogTrace(args ...any) []any {
	if j.TraceID == "" {
		return args
	}
	return append(args, "trace_id", j.TraceID, "span_id", j.SpanID)
}

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/supervisor"
)

// ToolName is the tool's name, the same as pydantic's mcp-run-python's.
const ToolName = "run_python_code"

// inputSchema is run_python_code's input: mcp-run-python's two arguments
// (python_code, global_variables) plus timeout_seconds, session_id,
// end_session and files (inputSchemaFor). Unknown arguments are refused.
var inputSchema = inputSchemaFor(Python)

// outputSchema describes structuredContent (Structured).
var outputSchema = &jsonschema.Schema{
	Type: "object",
	Properties: map[string]*jsonschema.Schema{
		"status": {Type: "string", Enum: []any{
			"success", "run-error", "install-error", "timeout", "memory-error", "crashed",
		}},
		"stdout": {Type: "string"},
		"stderr": {Type: "string"},
		"output": {Type: "array", Items: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"stream": {Type: "string", Enum: []any{"stdout", "stderr"}},
				"text":   {Type: "string"},
			},
			Required: []string{"stream", "text"},
		}},
		"return_value": {Description: "JSON of the last expression; null when it was None or the call failed"},
		"error":        {Types: []string{"string", "null"}},
		"dependencies": {Type: "array", Items: &jsonschema.Schema{Type: "string"}},
		"exit_code":    {Type: "integer"},
		"duration_ms":  {Type: "number"},
		"session_id":   {Type: "string", Description: "the Python session the call ran in; absent for a stateless call"},
		"checkpoint": {
			Type:        "object",
			Description: "present when the session's worker was lost and the session went back to its last checkpoint: the state after its call number after_call",
			Properties: map[string]*jsonschema.Schema{
				"after_call": {Type: "integer"}, "taken": {Type: "string"},
			},
			Required: []string{"after_call", "taken"},
		},
		"displays": {Type: "array", Items: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"mime_type": {Type: "string"}, "uri": {Type: "string"}, "bytes": {Type: "integer"},
			},
			Required: []string{"mime_type", "uri", "bytes"},
		}},
		"files": {Type: "array", Items: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"path": {Type: "string"}, "uri": {Type: "string"}, "mime_type": {Type: "string"}, "bytes": {Type: "integer"},
			},
			Required: []string{"path", "uri", "mime_type", "bytes"},
		}},
	},
	Required: []string{
		"status", "stdout", "stderr", "output", "return_value", "error",
		"dependencies", "exit_code", "duration_ms",
	},
}

var resolvedInput = func() *jsonschema.Resolved {
	r, err := inputSchema.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool input schema: %v", err))
	}
	return r
}()

// DescribePython is run_python_code's description: what the tool does and
// what it may rely on.
func DescribePython(l Language, o Options) string {
	net := map[supervisor.Network]string{
		supervisor.NetworkNone:     "It has no network access.",
		supervisor.NetworkPackages: "It has no network access beyond the package index.",
		supervisor.NetworkPublic:   "It can reach the public internet (pyodide.http.pyfetch) but not local or private addresses.",
		supervisor.NetworkAll:      "It can reach the network (pyodide.http.pyfetch).",
	}[o.Network]
	return fmt.Sprintf(`Run Python code and return its output and the value of its last expression.

The code runs in Python %s (Pyodide %s: CPython compiled to WebAssembly) in a sandbox with no access to the host's files, environment or processes. %s
%sThe code may be async: top-level "await" works.
The value of the last expression is returned as JSON (omitted when it is None).
stdout and stderr are captured, up to %s each.
Imports of packages Pyodide knows (numpy, pandas, ...) are installed on demand; a PEP 723 "# /// script" block with "dependencies = [...]" names packages explicitly.
The call is stopped after %s (timeout_seconds may set a shorter limit).
display(obj) shows rich values (images, SVG, HTML, markdown) in the result, as does a rich last expression; open matplotlib figures come back as PNG. Files the code writes under /output/ come back as resources; the "files" argument writes input files into the working directory.%s`,
		o.PythonVersion, o.PyodideVersion, net, sessionsDescription(o.Sessions, l.LeavesRunning), humanBytes(o.MaxOutput), o.Timeout, mountText(o.Mounts)) + o.CodeMode.Describe()
}

// mountText tells the model about the host folders it can read.
func mountText(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	return "\nHost folders are mounted read-only (unless marked writable) at: " + strings.Join(paths, ", ") + "."
}

// callSeq numbers calls for logs and the worker protocol.
var callSeq atomic.Uint64

// toolArgs are the decoded arguments of one call.
type toolArgs struct {
	PythonCode      string          `json:"python_code"`
	GlobalVariables json.RawMessage `json:"global_variables"`
	TimeoutSeconds  *float64        `json:"timeout_seconds"`
	SessionID       *string         `json:"session_id"`
	EndSession      bool            `json:"end_session"`
	Files           json.RawMessage `json:"files"`
}

// pythonTool is run_python_code's languageTool.
var pythonTool = &languageTool{lang: Python, resolved: resolvedInput}

// parseArgsFor checks the arguments of a call of lt's tool; the code, in
// lt's CodeArg, comes back in PythonCode. Its errors name the argument at
// fault and become tool errors, so the model can correct itself.
func parseArgsFor(raw json.RawMessage, maxCode int, lt *languageTool) (toolArgs, error) {
	codeArg := lt.lang.CodeArg
	args, ok := parseValidArgsFor(raw, codeArg, lt.lang.Globals)
	if !ok {
		var err error
		if args, err = parseArgsCheckedFor(raw, lt); err != nil {
			return args, err
		}
	}
	if len(args.PythonCode) > maxCode {
		return args, fmt.Errorf("invalid arguments: %s is %d bytes, more than the limit of %d bytes (max_code)",
			codeArg, len(args.PythonCode), maxCode)
	}
	if len(args.GlobalVariables) > maxCode {
		return args, fmt.Errorf("invalid arguments: global_variables is %d bytes of JSON, more than the limit of %d bytes (max_code)",
			len(args.GlobalVariables), maxCode)
	}
	if err := checkSessionArgs(args); err != nil {
		return args, err
	}
	if bytes.Equal(bytes.TrimSpace(args.GlobalVariables), []byte("{}")) {
		args.GlobalVariables = nil
	}
	return args, nil
}

// parseValidArgsFor decodes arguments that plainly satisfy the input
// schema of a tool whose code is codeArg, which takes global_variables when
// globals is set: in one pass and without the schema validator, which costs
// more than the rest of pyrun's work on a warm call. Anything else is not
// ok, and parseArgsCheckedFor explains what is wrong with it.
func parseValidArgsFor(raw json.RawMessage, codeArg string, globals bool) (toolArgs, bool) {
	var args toolArgs
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return args, false
	}
	var code *string
	for name, v := range fields {
		var err error
		switch name {
		case codeArg:
			err = json.Unmarshal(v, &code)
		case "global_variables":
			if !globals || len(v) == 0 || v[0] != '{' {
				return args, false
			}
			args.GlobalVariables = v
		case "timeout_seconds":
			err = json.Unmarshal(v, &args.TimeoutSeconds)
			if t := args.TimeoutSeconds; t == nil || !(*t > 0) {
				return args, false
			}
		case "session_id":
			err = json.Unmarshal(v, &args.SessionID)
			if id := args.SessionID; id == nil || *id == "" || len(*id) > maxSessionID {
				return args, false
			}
		case "end_session":
			if len(v) == 0 || (v[0] != 't' && v[0] != 'f') {
				return args, false
			}
			err = json.Unmarshal(v, &args.EndSession)
		case "files":
			// Checked entry by entry by decodeFiles.
			if len(v) == 0 || v[0] != '{' {
				return args, false
			}
			args.Files = v
		default:
			return args, false
		}
		if err != nil {
			return args, false
		}
	}
	if code == nil {
		return args, false
	}
	args.PythonCode = *code
	return args, true
}

// parseArgsCheckedFor validates arguments against lt's schema and decodes them.
func parseArgsCheckedFor(raw json.RawMessage, lt *languageTool) (toolArgs, error) {
	var args toolArgs
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	var generic any
	shallow := shallowArgs(raw)
	if err := json.Unmarshal(shallow, &generic); err != nil {
		return args, argError(decodeError(shallow, err))
	}
	if err := lt.resolved.Validate(generic); err != nil {
		if plain := explainArgs(generic, lt); plain != nil {
			return args, plain
		}
		return args, argError(err)
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return args, argError(err)
	}
	if codeArg := lt.lang.CodeArg; codeArg != Python.CodeArg {
		// Validated: an object whose code argument is a string.
		code, _ := generic.(map[string]any)[codeArg].(string)
		args.PythonCode = code
	}
	if t := args.TimeoutSeconds; t != nil && (math.IsInf(*t, 0) || math.IsNaN(*t)) {
		return args, errors.New("invalid arguments: timeout_seconds must be a finite number of seconds")
	}
	return args, nil
}

// shallowArgs is raw, an object of arguments, with every object or array
// value replaced by an empty one, for the schema's validator: it needs a
// decoded value, and decoding a large object of small entries (global
// variables, files) costs ten times its size in memory. What it leaves out
// is checked where the value is used (decodeFiles, the worker). raw
// itself when it is not an object.
func shallowArgs(raw json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || fields == nil {
		return raw
	}
	for name, v := range fields {
		switch t := bytes.TrimSpace(v); {
		case len(t) > 0 && t[0] == '{':
			fields[name] = json.RawMessage("{}")
		case len(t) > 0 && t[0] == '[':
			fields[name] = json.RawMessage("[]")
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return raw
	}
	return b
}

// decodeError names the argument whose value does not decode (a number too
// large for JSON numbers, say), when the arguments are an object.
func decodeError(raw json.RawMessage, err error) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return err
	}
	for name, v := range fields {
		var x any
		if e := json.Unmarshal(v, &x); e != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(e, &ute) && strings.HasPrefix(ute.Value, "number ") {
				// The one way a valid JSON value fails to decode.
				return fmt.Errorf("%s holds the %s, past the range of numbers pyrun reads", name, ute.Value)
			}
			return fmt.Errorf("%s: %w", name, e)
		}
	}
	return err
}

// argError reports arguments that do not decode or validate. The decoder's
// and validator's messages quote the offending value, which can be as large
// as the request: long words are shortened so that the message stays small
// and still names the argument.
func argError(err error) error {
	words := strings.Split(err.Error(), " ")
	for i, w := range words {
		if len(w) > 64 {
			cut := 32
			for cut > 0 && !utf8.RuneStart(w[cut]) {
				cut--
			}
			words[i] = w[:cut] + "..."
		}
	}
	msg := strings.Join(words, " ")
	if len(msg) > 1000 {
		msg = strings.ToValidUTF8(msg[:1000], "") + "..."
	}
	return errors.New("invalid arguments: " + msg)
}

// handle is the tool handler. A Python error, timeout or crash is a tool
// result with isError; so is bad input. Only a call the pool could not take
// (busy, over its client's limits, shutting down) is a tool error with a
// message and no result.
// runCall runs one call of a language's tool (handle puts limits around
// it), in the call's span (trace.go).
func (s *Server) runCall(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	lt := s.toolOf(req)
	ctx, span := s.startSpan(ctx, req, lt.lang.Tool)
	job := supervisor.Job{
		ID:      strconv.FormatUint(callSeq.Add(1), 10),
		Client:  clientOf(ctx, req),
		Session: s.sessionName(req.Session),
		// The pool runs it in its language (supervisor.Pools).
		Language: lt.lang.Name,
	}
	job.TraceID, job.SpanID = traceIDs(span)
	out, res, err := s.runJob(ctx, req, lt, job)
	endSpan(ctx, span, job, out, res)
	return out, err
}

// runJob runs job, a call of lt's tool with req's arguments; res is the
// pool's result, zero when the call did not run.
func (s *Server) runJob(ctx context.Context, req *sdk.CallToolRequest, lt *languageTool, job supervisor.Job) (_ *sdk.CallToolResult, res supervisor.Result, err error) {
	args, err := parseArgsFor(req.Params.Arguments, s.options().MaxCode, lt)
	if err != nil {
		return toolError(err), res, nil
	}
	files, err := decodeFiles(ctx, args.Files, s.options().MaxCode, s.options().MaxInputFiles)
	if err != nil {
		if errors.Is(err, errTooManyInputFiles) {
			s.front.counters.Refused.WithLabelValues("max_input_files").Inc()
		}
		return toolError(err), res, nil
	}
	job.Code, job.Globals, job.Files = args.PythonCode, args.GlobalVariables, files
	if cm := s.options().CodeMode; cm != nil && lt.lang.CodeMode {
		if caller, catalog := cm.ForRun(ctx, job.ID); caller != nil {
			job.Tools, job.Catalog = caller, catalog
		}
	}
	if t := args.TimeoutSeconds; t != nil {
		job.Timeout = jobTimeout(*t)
	}
	var ev supervisor.Events
	if s.levels.wantsLive(req) {
		lv := newLive(ctx, req.Session, job.ID, req.Params.GetProgressToken(), s.options().Live, s.log)
		defer lv.close() // before the SDK sends the result: every notification comes first
		ev = lv
	}
	if args.SessionID != nil {
		res, err = s.runInSession(ctx, lt.lang, args, job, ev)
		if err != nil && res.Status == "" {
			return toolError(sessionError(err)), res, nil
		}
	} else {
		res, err = s.pool.Run(ctx, job, ev)
	}
	if ctx.Err() != nil {
		s.log.Info("call cancelled", "id", job.ID, "why", cancelCause(ctx), "started", res.Status != "")
	}
	if err != nil && res.Status == "" {
		return toolError(err), res, nil
	}
	sc := structured(res)
	rich, displays, outFiles := s.richContent(res, job.Client)
	sc.Displays, sc.Files = displays, outFiles
	out := &sdk.CallToolResult{
		// The text block first and complete: some clients drop the rest.
		Content:           append([]sdk.Content{&sdk.TextContent{Text: FormatXML(res)}}, rich...),
		StructuredContent: sc,
		IsError:           res.Status != supervisor.StatusSuccess,
	}
	s.noteCell(req, lt, args, res, out) // appcells.go
	return out, res, nil
}

func toolError(err error) *sdk.CallToolResult {
	var r sdk.CallToolResult
	r.SetError(err)
	return &r
}

func humanBytes(n int) string { return flow.HumanBytes(n) }

// jobTimeout is a call's timeout_seconds as a limit: a positive value too
// small for a Duration (1e-10) or below supervisor.MinCallTimeout is
// rounded up to that minimum, rather than read as "no limit of its own".
func jobTimeout(seconds float64) time.Duration {
	return max(time.Duration(min(seconds, 1e6)*float64(time.Second)), supervisor.MinCallTimeout)
}

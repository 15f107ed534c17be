package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// Language describes one language's tool: its name, its code argument,
// what it tells the model. The tool, its input schema and its handler are
// all built from it, the same way for every language. Package lang makes
// one from each language's registration; Python is the tool a server has
// when Options.Languages names none.
type Language struct {
	// Name is the language as --languages and the supervisor's engines
	// spell it; calls carry it as supervisor.Job.Language.
	Name string
	// Title is how prose names it ("R"), and Article the article before
	// it ("an": "an R session").
	Title, Article string
	// Tool is the tool's name; CodeArg, its argument holding the code.
	Tool, CodeArg string
	// Versions are what the language runs, by name ({"r": "4.6.0",
	// "webr": "0.6.0"}), for the description; filled in at start.
	Versions map[string]string
	// Describe is the tool's description under the server's options;
	// nil: GenericDescription.
	Describe func(l Language, o Options) string
	// LeavesRunning says what a call's code can leave running between a
	// session's calls ("a timer, a promise"), for the description; "":
	// nothing.
	LeavesRunning string
	// Globals: the tool takes global_variables. CodeMode: its calls may
	// call code mode's tools. Network: its code may reach the network
	// that Options.Network allows (else none).
	Globals, CodeMode, Network bool
}

// Python is run_python_code, mcp-run-python's tool, as lang.Python makes
// it: the tool of a server whose Options name no languages.
var Python = Language{
	Name: "python", Title: "Python", Article: "a", Tool: ToolName, CodeArg: "python_code",
	Describe: DescribePython, LeavesRunning: "an asyncio task, a timer",
	Globals: true, CodeMode: true, Network: true,
}

// languages are the languages of o, Python alone when none are named.
func (o Options) languages() []Language {
	if len(o.Languages) == 0 {
		return []Language{Python}
	}
	return o.Languages
}

// languageTool is a language's tool with its checked schema.
type languageTool struct {
	lang     Language
	resolved *jsonschema.Resolved
}

// newLanguageTools builds the tools of langs, by tool name.
func newLanguageTools(langs []Language) map[string]*languageTool {
	m := map[string]*languageTool{}
	for _, l := range langs {
		if l.Name == Python.Name {
			m[l.Tool] = &languageTool{lang: l, resolved: resolvedInput}
			continue
		}
		r, err := inputSchemaFor(l).Resolve(nil)
		if err != nil {
			panic(fmt.Sprintf("%s tool input schema: %v", l.Name, err))
		}
		m[l.Tool] = &languageTool{lang: l, resolved: r}
	}
	return m
}

// inputSchemaFor is a language's tool input: its code, timeout_seconds,
// session_id, end_session and files (and Python's global_variables).
// Unknown arguments are refused.
func inputSchemaFor(l Language) *jsonschema.Schema {
	props := map[string]*jsonschema.Schema{
		l.CodeArg: {Type: "string", Description: l.Title + " code to run"},
		"timeout_seconds": {
			Type:             "number",
			ExclusiveMinimum: jsonschema.Ptr(0.0),
			Description:      "Time limit for this call in seconds; capped by the server's limit, at least 0.1",
		},
		// Sessions (pysessions.go). The annotation has clients mirror
		// the id into the Mcp-Param-Session-Id header, where a load
		// balancer can route on it.
		"session_id": {
			Type:        "string",
			MinLength:   jsonschema.Ptr(1),
			MaxLength:   jsonschema.Ptr(maxSessionID),
			Description: `"new" to start ` + l.Article + " " + l.Title + ` session whose state lasts across calls, or the session_id of a previous result to continue it; absent: a stateless call`,
			Extra:       map[string]any{"x-mcp-header": "Session-Id"},
		},
		"end_session": {
			Type:        "boolean",
			Description: "End the session after this call's code has run (" + l.CodeArg + " may be empty)",
		},
		"files": {
			Type:        "object",
			Description: `Files to write into the working directory before the code runs: relative path -> content, a string for text or {"base64": "..."} for bytes`,
			AdditionalProperties: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
				{Type: "string"},
				{
					Type:                 "object",
					Properties:           map[string]*jsonschema.Schema{"base64": {Type: "string"}},
					Required:             []string{"base64"},
					AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
				},
			}},
		},
	}
	if l.Globals {
		props["global_variables"] = &jsonschema.Schema{
			Type:        "object",
			Description: "Map of global variables in context when the code is executed",
		}
	}
	return &jsonschema.Schema{
		Type:                 "object",
		Properties:           props,
		Required:             []string{l.CodeArg},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

// outputSchemaFor is a language's structuredContent: Python's, worded
// for the language.
func outputSchemaFor(l Language) *jsonschema.Schema {
	if l.Name == Python.Name {
		return outputSchema
	}
	s := *outputSchema
	s.Properties = maps.Clone(outputSchema.Properties)
	s.Properties["return_value"] = &jsonschema.Schema{Description: "JSON of the last expression; null when it had no value or the call failed"}
	s.Properties["session_id"] = &jsonschema.Schema{Type: "string", Description: "the " + l.Title + " session the call ran in; absent for a stateless call"}
	return &s
}

// languageToolDef is a language's tool under opts.
func languageToolDef(l Language, opts Options) *sdk.Tool {
	title := "Run " + l.Title + " code"
	return &sdk.Tool{
		Name:         l.Tool,
		Title:        title,
		Description:  languageDescription(l, opts),
		InputSchema:  inputSchemaFor(l),
		OutputSchema: outputSchemaFor(l),
		Annotations: &sdk.ToolAnnotations{
			Title:           title,
			ReadOnlyHint:    false,
			DestructiveHint: new(false),
			IdempotentHint:  false,
			OpenWorldHint:   new(l.Network && opts.Network != supervisor.NetworkNone),
		},
	}
}

func languageDescription(l Language, o Options) string {
	if l.Describe != nil {
		return l.Describe(l, o)
	}
	return GenericDescription(l, o)
}

// GenericDescription tells a model what a language's tool does and what
// it may rely on, from what every engine shares.
func GenericDescription(l Language, o Options) string {
	var runs []string
	for _, name := range slices.Sorted(maps.Keys(l.Versions)) {
		runs = append(runs, name+" "+l.Versions[name])
	}
	in := ""
	if len(runs) > 0 {
		in = " (" + strings.Join(runs, ", ") + ")"
	}
	return fmt.Sprintf(`Run %s code and return its output and the value of its last expression.

The code runs%s in a sandbox with no access to the host's files, environment, processes or network.
%sThe value of the last expression is returned as JSON.
stdout and stderr are captured, up to %s each.
The call is stopped after %s (timeout_seconds may set a shorter limit).
Files the code writes under /output/ come back as resources; the "files" argument writes input files into the working directory.%s`,
		l.Title, in, languageSessionsDescription(l, o.Sessions), humanBytes(o.MaxOutput), o.Timeout, mountText(o.Mounts))
}

// languageSessionsDescription is the description's paragraph on sessions
// for a language other than Python.
func languageSessionsDescription(l Language, o SessionOptions) string {
	if o.Max <= 0 {
		return "Each call starts from a fresh state and an empty working directory; nothing is kept between calls, so each call must be self-contained.\n"
	}
	return fmt.Sprintf(`Without session_id, each call starts from a fresh state and an empty working directory, and nothing is kept between calls.
With session_id "new", the call starts %s %s session whose variables and files last across its calls. The result gives the session_id (in <session_id> and structuredContent.session_id); pass it in the next calls to continue, and end_session: true when done. A session's calls run one at a time, in order; a session belongs to the language that started it.
A session ends after %s without a call, %s after it started, when it is ended, when pyrun restarts, when a call kills its worker%s; its state is then gone; start a new session then. At most %d %s sessions can be open at once.
`, l.Article, l.Title, shortDuration(o.Idle), shortDuration(o.MaxAge), idleCPUText(o, l.LeavesRunning), o.Max, l.Title)
}

// instructions tell a client which tools to call.
func instructions(langs []Language) string {
	if len(langs) == 1 {
		l := langs[0]
		return fmt.Sprintf(`Call the %q tool with the %s code to run.`, l.Tool, l.Title)
	}
	var parts []string
	for _, l := range langs {
		parts = append(parts, fmt.Sprintf("%q with %s code", l.Tool, l.Title))
	}
	return "Call " + strings.Join(parts, ", ") + " to run it; each language's calls, sessions and limits are its own."
}

// toolOf is the tool a call is for; run_python_code's when its name is
// none of the tools (a request built by hand).
func (s *Server) toolOf(req *sdk.CallToolRequest) *languageTool {
	if req != nil && req.Params != nil {
		if lt := s.tools[req.Params.Name]; lt != nil {
			return lt
		}
	}
	return pythonTool
}

// disabledTools answers a call of a disabled language's tool (Options.Disabled)
// before the SDK, which would call it an unknown tool: the tool exists,
// its language is off, and --languages turns it on. The answer is the
// error an unknown tool gets (invalid params), since the tool is not
// listed, with words that say what to do.
func disabledTools(o Options) sdk.Middleware {
	off := map[string]Language{}
	for _, l := range o.Disabled {
		off[l.Tool] = l
	}
	var on []string
	for _, l := range o.languages() {
		on = append(on, l.Name)
	}
	served := strings.Join(on, ",")
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if r, ok := req.(*sdk.CallToolRequest); ok && method == "tools/call" && r.Params != nil {
				if l, isOff := off[r.Params.Name]; isOff {
					return nil, rpcError(jsonrpc.CodeInvalidParams,
						"tool %q runs %s code, and %s is not served here: this pyrun was started with --languages %s; start it with --languages %s,%s for the tool",
						l.Tool, l.Title, l.Title, served, served, l.Name)
				}
			}
			return next(ctx, method, req)
		}
	}
}

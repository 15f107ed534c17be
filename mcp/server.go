// Package mcp is pyrun's MCP front end: the run_python_code tool (schema,
// description, argument checks), result formatting (mcp-run-python's XML
// text plus structured content), stdio and the local socket. HTTP is
// package httpfront's, which HTTPHandler builds; the limits both share are
// package flow's. It calls the worker pool through the small Runner
// interface and knows nothing of processes.
//
//	srv := mcp.New(pool, mcp.Options{PythonVersion: rt.Python, ...}, log)
//	err := srv.RunStdio(ctx)
//	h := srv.HTTPHandler(mcp.HTTPOptions{...}) // an *httpfront.Handler
package mcp

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/pyrun/pyrun/mcp/apps"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/outputs"
	"github.com/pyrun/pyrun/supervisor"
)

// Runner runs calls; *supervisor.Pool is one.
type Runner interface {
	Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error)
}

// Options describe the server to its clients.
type Options struct {
	Version        string // pyrun's version
	PythonVersion  string
	PyodideVersion string
	Timeout        time.Duration // the per-call limit, for the tool description
	MaxOutput      int           // bytes per stream, for the tool description
	MaxCode        int           // largest python_code accepted, in bytes
	// MaxInputFiles bounds the entries of a call's files argument; 0:
	// DefaultMaxInputFiles.
	MaxInputFiles int
	Network       supervisor.Network
	Live          LiveOptions         // what a call sends its client while it runs
	Delivery      flow.DeliveryLimits // results waiting to be written
	// Sessions are the Python sessions' lifetimes and bound, for the tool
	// description; zero: no sessions (see UseSessions).
	Sessions SessionOptions
	// MaxDisplays and MaxDisplayBytes cap the image blocks of a call's
	// /output/ files together with its displays (the pool caps displays).
	// 0: 16 and 4 MiB.
	MaxDisplays     int
	MaxDisplayBytes int
	// Outputs bounds the store of /output/ files (output_ttl, output_store,
	// output_store_files).
	Outputs outputs.Config
	// Mounts are the sandbox paths of host folders, for the tool description.
	Mounts []string
	// Languages are the languages served, a tool each, in order; nil:
	// Python alone. The pool runs each call by its Job.Language.
	Languages []Language
	// Disabled are the languages pyrun has that this server does not
	// serve: a call of one of their tools is told that the tool exists and
	// which --languages serves it, not "unknown tool". nil: none.
	Disabled []Language
	// Requests bound the request bytes pyrun holds; a zero field is worked
	// out from MaxCode (RequestLimits).
	Requests flow.RequestLimits
	// CodeMode gives calls the tools of other MCP servers (mcp_tools in
	// Python); nil: none. Its changes reach clients as a changed tool
	// description (see New).
	CodeMode *codemode.Hub
	// Tasks bound MCP tasks (tasks.go).
	Tasks TaskOptions
	// AppCellBytes bounds the code of sessions' calls kept for the MCP App
	// view (package apps, appcells.go); 0: apps.DefaultCellBytes, less:
	// none kept.
	AppCellBytes int64
}

// Server is pyrun's MCP server. Its methods are safe for concurrent use.
type Server struct {
	pool  Runner
	log   hclog.Logger
	sdk   *sdk.Server
	names sessionNames
	// levels knows the sessions that set a log level, for wantsLive.
	levels logLevels
	// outputs holds the /output/ files of calls for resources/read;
	// reading bounds the bytes of them read into memory at once.
	outputs *outputs.Store
	reading *semaphore.Weighted
	front   frontState
	tasks   *taskStore  // MCP tasks of stdio and the socket (tasks.go)
	cells   *apps.Cells // sessions' calls, for the MCP App view (appcells.go)

	// tools are the languages' tools, by tool name; fixed at New.
	tools map[string]*languageTool

	mu        sync.Mutex
	opts      Options           // guarded by mu; replaced, never changed, by SetOptions
	sessions  SessionRunner     // guarded by mu; nil: no sessions
	tracer    trace.Tracer      // guarded by mu; nil: no spans (trace.go)
	published map[string]string // the tool descriptions clients were given, by tool; guarded by mu
}

// New builds the MCP server around pool.
func New(pool Runner, opts Options, log hclog.Logger) *Server {
	opts = opts.withDefaults()
	s := &Server{pool: pool, opts: opts, log: log, outputs: outputs.New(opts.Outputs),
		reading: semaphore.NewWeighted(maxReading),
		tools:   newLanguageTools(opts.languages()), published: map[string]string{},
		tasks: newTaskStore(opts.Tasks.withDefaults()), cells: apps.NewCells(opts.AppCellBytes)}
	s.front.init()
	s.front.out.SetLimits(opts.Delivery)
	s.front.bytes.SetLimits(opts.Requests)
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "pyrun", Title: "pyrun: Python in a sandbox", Version: opts.Version},
		&sdk.ServerOptions{
			Instructions: instructions(opts.languages()),
			// 2026-07-28 (stateless, per-request _meta) and the
			// handshake-era versions that most clients in use still speak.
			// Over HTTP, revisions.go routes each request to the handler that
			// serves its revision.
			SupportedProtocolVersions: ProtocolVersions,
			Logger:                    slogFor(log.Named("mcp")),
			Capabilities: &sdk.ServerCapabilities{
				Logging: &sdk.LoggingCapabilities{},
				// listChanged: a reload or code mode changes the tool description.
				Tools: &sdk.ToolCapabilities{ListChanged: true},
				// resources/read serves calls' /output/ files; the list
				// stays empty, as every file belongs to one client.
				Resources: &sdk.ResourceCapabilities{},
				// The 2026-07-28 tasks extension (tasks.go), in
				// server/discover; clients of older revisions ignore it. And
				// MCP Apps (package apps), whose view only a client that
				// declares it is shown.
				Extensions: map[string]any{tasksExtension: map[string]any{}, apps.ExtensionID: map[string]any{}},
			},
		})
	for _, l := range opts.languages() {
		s.published[l.Tool] = languageDescription(l, opts)
		s.sdk.AddTool(languageToolDef(l, opts), s.handle)
	}
	s.sdk.AddResourceTemplate(outputTemplate, s.readOutput)
	// The MCP App view of the run tools' results, for clients of the
	// extension (package apps).
	s.sdk.AddResource(apps.Resource(), apps.Read)
	s.sdk.AddReceivingMiddleware(s.levels.middleware, disabledTools(opts), apps.Middleware(func(name string) bool { return s.tools[name] != nil }))
	if opts.CodeMode != nil {
		opts.CodeMode.OnChange(s.republish)
	}
	return s
}

// RunStdio serves one client on stdin/stdout until it disconnects or ctx ends.
func (s *Server) RunStdio(ctx context.Context) error {
	return s.runIO(ctx, os.Stdin, os.Stdout) // stdio.go
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/access"
	"github.com/pyrun/pyrun/mcp/apps"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/httpfront"
	"github.com/pyrun/pyrun/mcp/localsock"
	"github.com/pyrun/pyrun/mcp/netguard"
	"github.com/pyrun/pyrun/mcp/outputs"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/oswall"
	"github.com/pyrun/pyrun/supervisor/packages"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// options is everything a flag or the config file can set. Flags and file
// keys share one parser: a key is the flag's name in snake_case and takes the
// flag's syntax, and a flag given on the command line wins over the file.
type options struct {
	configFile string

	// supervisor is the pools' configuration, their own flags bound to it
	// (it checks them: Validate); the daemon adds each pool's size and
	// what the other parts decide for pools (derived.go, poolConfig).
	supervisor supervisor.Config
	// mcp is the MCP front end's: its own flags bound to it (Validate);
	// the daemon adds what it takes from the pools' settings, the runtime
	// and the languages (derived.go, frontOptions).
	mcp mcp.Options

	runtimeDir string

	logLevel     string
	logFormat    string
	otlpEndpoint string // tracing.go

	listen string
	// http is serve's HTTP front end's: its own flags bound to it
	// (Validate); serve adds the figures it shows (serve.go).
	http         httpfront.Options
	drainTimeout time.Duration

	// auth is serve's access control, bound to its flags (Validate); a
	// PublicURL of "" is http:// and the listen address (newGuard).
	auth           access.Config
	insecureNoAuth bool
	// clients are one client's places in the pools, with access control:
	// bound to their flags (Validate); the daemon adds the pool's size
	// for a MaxCalls of 0 and the queue's timeout (daemon.go).
	clients mcp.ClientLimits

	// Python sessions (pysessions.go): their settings, bound to their
	// flags (Limits, CheckpointDelay, MoveWait; Validate); each language's
	// Manager adds the rest (startSessions).
	sessions          sessions.Options
	store             checkpoint.StoreConfig // bound to its flags (Validate)
	sessionWorker     string                 // shared or own
	sessionsPerWorker int
	instanceID        string
	// Rich results (docs/rich-results.md): the store's settings are mcp's
	// (Outputs), the folder it is kept in pyrun's.
	outputDir string
	// outputs is the folder pyrun made in outputDir for this run (serve,
	// stdio): the output store's files and those on their way to it.
	// Not a flag; "" until made.
	outputs string
	out     string
	// What one client may hold of pyrun (mcp/flow, mcp/httpfront's
	// session.go, mcp/netguard).
	goMemoryLimit byteSize
	conns         netguard.Limits // bound to their flags; a Total of 0: netguard.TotalFor
	mcpServers    serversFlag
	hub           codemode.Options // code mode's limits, bound to their flags; MaxResult is max-output's
	// Languages (languages.go).
	languages   stringList
	pools       [lang.Count]poolFlags // by lang.Index
	runLanguage string                // pyrun run --language
	// The local socket (local.go).
	socket      string
	attach      string
	socketConns localsock.Limits // bound to its flag
}

// flagSet declares every flag on o, with its default.
func (o *options) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.mcp = mcp.Options{MaxCode: 1 << 20, MaxInputFiles: mcp.DefaultMaxInputFiles,
		Live:    mcp.LiveOptions{Buffer: 256 << 10, ProgressInterval: time.Second},
		Outputs: outputs.Config{TTL: 15 * time.Minute, MaxBytes: 64 << 20, MaxFiles: 256}, AppCellBytes: apps.DefaultCellBytes}
	o.supervisor = supervisor.Config{MaxOutput: 64 << 10, StderrLogPerCall: supervisor.DefaultStderrLogPerCall,
		StderrLogRate: supervisor.DefaultStderrLogRate, WorkerFileSize: oswall.DefaultFileSize, MaxDisplayBytes: 4 << 20}
	fs.StringVar(&o.configFile, "config", "", "JSON config `file`; its keys are these flags' names in snake_case")
	fs.DurationVar(&o.supervisor.Timeout, "timeout", 30*time.Second, "per-call wall-clock limit, and the cap on a call's timeout_seconds")
	fs.Var(bytesize.Var(&o.supervisor.MaxOutput), "max-output", "cap on each of stdout, stderr and the return value, per call (bytes or 64KiB)")
	fs.Var(bytesize.Var(&o.mcp.MaxCode), "max-code", "largest python_code accepted, and largest global_variables as JSON (bytes or 1MiB)")
	fs.IntVar(&o.mcp.MaxInputFiles, "max-input-files", o.mcp.MaxInputFiles, "entries a call's files argument may hold; more are refused with a tool error")
	fs.IntVar(&o.supervisor.MaxQueue, "max-queue", 0, "calls that may wait for a free worker (default 64 per worker)")
	fs.DurationVar(&o.supervisor.QueueTimeout, "queue-timeout", 60*time.Second, "longest a call waits for a free worker")
	fs.IntVar(&o.supervisor.ClientMaxWorkers, "client-max-workers", 0, "workers of a language one client may own while other clients own some or wait (a worker that ran a client's call runs no other client's); a client alone may own the whole pool (default: half the pool, rounded up, at least 1)")
	fs.DurationVar(&o.supervisor.ClientWorkerIdle, "client-worker-idle", supervisor.DefaultClientWorkerIdle, "retire a client's worker unused this long; its next call takes a fresh one")
	o.http = httpfront.Options{SessionTimeout: time.Hour, KeepAlive: 15 * time.Second, MaxClients: 32}
	fs.IntVar(&o.http.MaxClients, "metrics-max-clients", o.http.MaxClients, "clients named in pyrun_client_workers and, without access control, /healthz's workers_by_client (the first by name); the rest count as other")
	fs.Var((*stringList)(&o.supervisor.Deps), "deps", "comma-separated packages (PEP 508: numpy, attrs==23.2) every worker loads before it takes a call")
	fs.StringVar(&o.supervisor.PackageIndex, "package-index", "", "where Pyodide's packages come from: a URL or a `directory` laid out like the Pyodide distribution (default: the CDN of the pinned Pyodide version)")
	fs.StringVar(&o.supervisor.PyPI, "pypi", packages.DefaultPyPI, "`URL` of PyPI's JSON API (or a mirror's), for PEP 723 requirements neither the package index nor the wheelhouse has; none: never ask")
	fs.StringVar(&o.supervisor.Wheelhouse, "wheelhouse", "", "`directory` of wheels (pure Python, or built for Pyodide) to install from, by name and version")
	fs.StringVar((*string)(&o.supervisor.Network), "network", string(supervisor.NetworkPublic), "what Python may reach: none, packages, public (no private or loopback addresses) or all")
	fs.StringVar((*string)(&o.supervisor.Isolation), "isolation", string(supervisor.IsolationCall), "call (fresh globals, files and modules per call) or process (a new worker per call)")
	fs.Var(bytesize.Var(&o.mcp.Live.Buffer), "live-buffer", "output of one call waiting to be sent to a slow client as log messages; more is left out of the live stream, never out of the result (bytes or 256KiB)")
	fs.DurationVar(&o.mcp.Live.ProgressInterval, "progress-interval", o.mcp.Live.ProgressInterval, "gap between two progress notifications of a call that has a progress token")
	fs.IntVar(&o.supervisor.MaxWorkerThreads, "max-worker-threads", supervisor.DefaultMaxWorkerThreads, "threads a worker process may have (JavaScript Worker threads made through import js count); past it the worker is killed and replaced")
	o.supervisor.WarmCalls = supervisor.DefaultWarmCalls
	fs.Var(noneCount(&o.supervisor.WarmCalls, 10000), "warm-calls", "calls of its own a fresh Python worker runs while it waits for its first call, so that it serves that one at full speed (0: none; never under --isolation process)")
	fs.Float64Var(&o.supervisor.IdleCPU, "idle-cpu", supervisor.DefaultIdleCPU, "share of one CPU an idle worker may use over a second (code a call left running); past it the worker is replaced. A session's worker may use as much over 10s between its calls; past it the session ends")
	fs.Var(bytesize.Var(&o.supervisor.IdleMemorySlack), "idle-memory-slack", "resident memory a worker may hold after a call beyond what it held fresh; past it the worker is replaced (bytes or 128MiB; default a quarter of memory-limit, at least 64MiB)")
	fs.Var(bytesize.Var(&o.supervisor.StderrLogPerCall), "worker-log-per-call", "bytes of worker stderr (js.console.log, os.write(2)) logged per call; the rest is counted (bytes or 16KiB)")
	fs.Var(bytesize.Var(&o.supervisor.StderrLogRate), "worker-log-rate", "bytes of worker stderr logged a second, for all workers together (bytes or 64KiB)")
	fs.StringVar((*string)(&o.supervisor.OSSandbox), "os-sandbox", string(oswall.ModeAuto), "the OS sandbox around every worker process (seccomp, Landlock, an empty network namespace, no_new_privs, resource limits): auto (every layer the machine offers; a warning names each missing one), required (refuse to start without seccomp and Landlock) or off")
	fs.IntVar(&o.supervisor.WorkerOpenFiles, "worker-open-files", oswall.DefaultOpenFiles, "files a worker process may hold open (RLIMIT_NOFILE, set by the OS sandbox); past it, opening one more fails in the call")
	fs.Var(bytesize.Var(&o.supervisor.WorkerFileSize), "worker-file-size", "largest file a worker may write, in a :rw mount (RLIMIT_FSIZE, set by the OS sandbox); a write past it fails in the call with 'File too large' (bytes or 1GiB)")
	fs.StringVar(&o.runtimeDir, "runtime-dir", supervisor.DefaultRuntimeRoot(), "where pyrun installs Deno and Pyodide")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error (run and warmup: warn, so that their output is not lost among the logs)")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "`URL` of an OpenTelemetry collector (OTLP over HTTP) to export a span of each call to; one without a path gets /v1/traces (default: no spans are made)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3001", "serve: address to listen on (none: no HTTP, only --socket)")
	fs.BoolVar(&o.http.Stateless, "stateless", false, "serve: /mcp without sessions, for load balancers")
	fs.DurationVar(&o.http.SessionTimeout, "session-timeout", o.http.SessionTimeout, "serve: close a /mcp session after this long without a request")
	fs.Var(noneDuration{&o.http.KeepAlive}, "keep-alive", "serve: comment line on quiet event streams this often, so long calls are not dropped (0: never)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 0, "serve: on SIGTERM, how long running calls may take to finish (default: the timeout plus 5s)")
	fs.StringVar(&o.auth.TokenFile, "auth-token-file", "", "serve: `file` of bearer tokens, one client a line (name:token); re-read when it changes")
	fs.StringVar(&o.auth.Issuer, "auth-issuer", "", "serve: OAuth authorization server (issuer URL) whose JWT access tokens are accepted")
	fs.Var((*stringList)(&o.auth.Audiences), "auth-audience", "serve: comma-separated audiences a JWT's aud must hold one of (default: pyrun's resource URLs, public-url/mcp and /sse)")
	fs.StringVar(&o.auth.JWKSURL, "auth-jwks-url", "", "serve: URL of the issuer's signing keys (JWKS) (default: jwks_uri from the issuer's metadata)")
	fs.StringVar(&o.auth.PublicURL, "public-url", "", "serve: the URL clients reach pyrun at, for OAuth metadata (default: http:// and the listen address)")
	fs.BoolVar(&o.http.ProtectMetrics, "metrics-auth", true, "serve: with access control, /metrics needs a token too")
	fs.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "serve: listen beyond loopback without access control: anyone who reaches pyrun runs code")
	o.clients = mcp.ClientLimits{MaxQueue: 16}
	fs.IntVar(&o.clients.MaxCalls, "client-max-calls", 0, "serve, with access control: calls one client may have running or waiting for a worker, its session calls included (default: the pool size)")
	fs.IntVar(&o.clients.MaxQueue, "client-max-queue", o.clients.MaxQueue, "serve, with access control: more calls of one client that may wait for those places; more are refused")
	o.sessionFlags(fs)
	fs.IntVar(&o.supervisor.MaxDisplays, "max-displays", 16, "displays (display(), rich last values, figures) one call returns; more are dropped with a note")
	fs.Var(bytesize.Var(&o.supervisor.MaxDisplayBytes), "max-display-bytes", "bytes of displays one call returns (bytes or 4MiB)")
	fs.DurationVar(&o.mcp.Outputs.TTL, "output-ttl", o.mcp.Outputs.TTL, "how long a call's /output/ files stay readable with resources/read")
	fs.Var(bytesize.Var(&o.mcp.Outputs.MaxBytes), "output-store", "bytes of /output/ files pyrun holds for resources/read, and returns from one call; the oldest are dropped first (bytes or 64MiB)")
	fs.IntVar(&o.mcp.Outputs.MaxFiles, "output-store-files", o.mcp.Outputs.MaxFiles, "/output/ files pyrun holds, and returns from one call; the oldest are dropped first")
	fs.StringVar(&o.outputDir, "output-dir", "", "`directory` in which pyrun keeps calls' /output/ files on disk (a folder of its own, made at start and removed at exit; default: the system's temporary directory)")
	fs.Var(noneBytes(&o.mcp.AppCellBytes, 1<<30), "app-cell-bytes", "bytes of sessions' code pyrun keeps, all sessions together, so that the MCP App view of a session's call lists the session's earlier cells; the oldest are dropped first; 0: none (bytes or 4MiB)")
	fs.Var(mountsVar{&o.supervisor.Mounts}, "mount", "host folder every call sees: `HOST_DIR:SANDBOX_DIR` read-only, or HOST_DIR:SANDBOX_DIR:rw writable; repeat or separate with commas")
	fs.StringVar(&o.out, "out", "", "run: `directory` to save the call's displays (display-N.png, ...) and /output/ files in")
	o.flagLimits(fs)
	o.languageFlags(fs)
	o.localFlags(fs)
	fs.Var(&o.mcpServers, "mcp-servers", "code mode: `JSON` object of MCP servers whose tools Python may call, as in Claude Desktop's mcpServers, each with \"allow\": [tool names] and \"timeout\"")
	o.hub = codemode.DefaultOptions()
	fs.IntVar(&o.hub.MaxCalls, "max-tool-calls", o.hub.MaxCalls, "code mode: tool calls one run may make")
	fs.IntVar(&o.hub.Concurrency, "tool-concurrency", o.hub.Concurrency, "code mode: tool calls of one run in progress at once")
	fs.Var(bytesize.Var(&o.hub.MaxListing), "max-tool-listing", "code mode: size of the function list in the tool description; a longer one is summarised (bytes or 8KiB)")
	fs.Var(bytesize.Var(&o.hub.MaxMessage), "max-tool-message", "code mode: largest message pyrun reads from an MCP server; a larger or broken one fails the tool call it answers, and the connection is kept (bytes or 16MiB)")
	explainDurations(fs)
	return fs
}

// flagLimits declares the flags that bound what one client can hold of
// pyrun: connections, sessions, results waiting to be written.
func (o *options) flagLimits(fs *flag.FlagSet) {
	o.mcp.Delivery = flow.DefaultDeliveryLimits()
	fs.DurationVar(&o.mcp.Delivery.WriteTimeout, "write-timeout", o.mcp.Delivery.WriteTimeout, "longest one write to an HTTP client may take (an event stream, a response); a stream that does not drain is closed")
	fs.IntVar(&o.mcp.Delivery.SessionResults, "session-pending-results", o.mcp.Delivery.SessionResults, "results that may wait to be written to one session; past it, calls are refused (on stdio, no more requests are read)")
	fs.Var(bytesize.Var(&o.mcp.Delivery.SessionBytes), "session-pending-bytes", "bytes of results that may wait to be written to one session (bytes or 8MiB)")
	fs.Var(bytesize.Var(&o.mcp.Delivery.ClientBytes), "client-pending-bytes", "bytes of results that may wait to be written to one client's sessions (bytes or 32MiB)")
	fs.Var(bytesize.Var(&o.mcp.Requests.MaxBytes), "max-request-bytes", "bytes of requests pyrun holds at once for all clients: bodies being read and the arguments of calls in flight; a request past it is refused before it is decoded (bytes or 64MiB; 0: 64MiB, or four times client-max-request-bytes if more)")
	fs.Var(bytesize.Var(&o.mcp.Requests.ClientMaxBytes), "client-max-request-bytes", "the same for one client (token, or IP address; on stdio, no more requests are read) (bytes or 16MiB; 0: 16MiB, or two of the largest request bodies if more)")
	fs.Var(&o.goMemoryLimit, "go-memory-limit", "soft limit on pyrun's own Go heap, so that its garbage is collected before it grows past what the other limits let clients make pyrun hold (bytes or 512MiB; 0: derived from them, see docs/configuration.md; GOMEMLIMIT wins)")
	o.http.Sessions = httpfront.SessionLimits{Max: httpfront.DefaultMaxSessions, ClientMax: httpfront.DefaultClientMaxSessions}
	fs.IntVar(&o.http.Sessions.Max, "max-mcp-sessions", o.http.Sessions.Max, "serve: MCP sessions (Streamable HTTP and HTTP+SSE) open at once; more are refused")
	fs.IntVar(&o.http.Sessions.ClientMax, "client-max-mcp-sessions", o.http.Sessions.ClientMax, "serve: MCP sessions one client (token, or remote address) may have open; a new one closes its session idle the longest")
	o.conns = netguard.Limits{PerAddr: 128}
	fs.DurationVar(&o.conns.HeaderTimeout, "header-timeout", 10*time.Second, "serve: longest a request's headers may take to arrive")
	fs.DurationVar(&o.conns.BodyTimeout, "body-timeout", 30*time.Second, "serve: longest a request's body may take to arrive, after its headers")
	fs.IntVar(&o.conns.Total, "max-conns", 0, "serve: HTTP connections open at once (default: 1024, fewer when the open-files limit is low, to leave room for workers)")
	fs.IntVar(&o.conns.PerAddr, "max-conns-per-addr", o.conns.PerAddr, "serve: HTTP connections open at once from one IP address")
}

// checkLimits checks the values flagLimits declares.
func (o *options) checkLimits() error {
	if err := firstError(o.http.Validate(), o.conns.Validate(), o.clients.Validate()); err != nil {
		return err
	}
	switch {
	case o.goMemoryLimit < 0:
		return errors.New("go-memory-limit must not be negative")
	case o.goMemoryLimit != 0 && o.goMemoryLimit < 64<<20:
		return fmt.Errorf("go-memory-limit must be at least 64MiB, not %s", o.goMemoryLimit)
	}
	return nil
}

// loadOptions parses args (flags and positional arguments, in any order) and the config
// file they name. It is pure: a reload calls it again with the same args.
func loadOptions(cmd string, args []string) (*options, []string, error) {
	o := &options{}
	fs := o.flagSet(cmd)
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, nil, explainFlagError(cmd, fs, err)
	}
	if o.configFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := applyConfigFile(fs, o.configFile, set); err != nil {
			return nil, nil, err
		}
	}
	if o.runtimeDir == "" {
		o.runtimeDir = supervisor.DefaultRuntimeRoot()
	}
	quietLogs(cmd, fs, o)
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	return o, rest, nil
}

func (o *options) check() error {
	if err := firstError(o.supervisor.Validate(), o.mcp.Validate()); err != nil {
		return err
	}
	switch {
	case o.drainTimeout < 0:
		return fmt.Errorf("drain-timeout must not be negative, not %s", o.drainTimeout)
	}
	if err := firstError(
		o.auth.Validate(),
		o.hub.Validate(),
	); err != nil {
		return err
	}
	if err := o.checkSessions(); err != nil {
		return err
	}
	if err := o.checkLimits(); err != nil {
		return err
	}
	if err := o.checkLanguages(); err != nil {
		return err
	}
	if err := o.checkLocal(); err != nil {
		return err
	}
	if _, err := o.otlpURL(); err != nil {
		return err
	}
	if hclogLevel(o.logLevel) == 0 {
		return fmt.Errorf("log-level must be trace, debug, info, warn or error, not %q", o.logLevel)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("log-format must be text or json, not %q", o.logFormat)
	}
	return nil
}

// outside is the error of flag name's value v when it is not between lo
// and hi, which it writes as the flag takes them (1KiB); nil when it is.
func outside[T int | byteSize](name string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s must be between %v and %v, not %v", name, lo, hi, v)
	}
	return nil
}

// firstError is the first of errs that is not nil.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// settings are o's values in flag syntax, by flag name.
func (o *options) settings() map[string]string {
	var c options
	fs := c.flagSet("settings") // binds the flags to c, at their defaults
	c = *o
	m := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

// keepRestartOnly gives o old's values of the settings that apply only at start.
func (o *options) keepRestartOnly(old *options) {
	var c options
	fs := c.flagSet("restart-only")
	c = *o
	prev := old.settings()
	for _, name := range restartOnly {
		if f := fs.Lookup(name); f != nil {
			if r, ok := f.Value.(interface{ reset() }); ok {
				r.reset() // a list that Set adds to
			}
			_ = fs.Set(name, prev[name])
		}
	}
	*o = c
}

// makeOutputs makes the folder of this run's /output/ files in
// output-dir (o.outputs) and returns a function that removes it. The
// directory is looked at only here, as pyrun starts (a manifest's path
// need not exist where its options are checked).
func (o *options) makeOutputs() (func(), error) {
	dir, err := os.MkdirTemp(o.outputDir, "pyrun-outputs-")
	if err != nil {
		return nil, fmt.Errorf("output-dir: %w", err)
	}
	o.outputs = dir
	return func() { _ = os.RemoveAll(dir) }, nil
}

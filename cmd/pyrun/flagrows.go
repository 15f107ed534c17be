package main

// The table of pyrun's settings: every flag, which is also a key of the
// config file, in one row, and the rows in the groups a reader looks for
// them in. From it come `pyrun CMD --help`'s groups (help.go),
// docs/configuration.md's tables and configs/pyrun.json, the example config
// (both written by `go generate ./cmd/pyrun`, configdoc_test.go), and the
// settings a reload leaves as they are (restartOnly). The flags
// themselves, their types, defaults and help, are declared in flagSet.

// Commands whose flags a group is for.
var (
	forCalls    = []string{"stdio", "serve", "run"}
	forServices = []string{"stdio", "serve"}
	forAll      = []string{"stdio", "serve", "run", "warmup", "version"}
	forSetup    = []string{"stdio", "serve", "run", "warmup"}
)

// configGroup is the flags a reader looks for together: a table of
// docs/configuration.md with a link to the page that explains them, and a
// group of the help of each command in commands.
type configGroup struct {
	title, see string
	commands   []string
	rows       []flagRow
}

// flagRow is one setting.
type flagRow struct {
	name string
	// restart: it applies only when pyrun starts; a reload keeps the value
	// in force and warns.
	restart bool
	// note is the example config's comment on the key: what the setting
	// does, with more room than the flag's help. "": the key is not in the
	// example (--config).
	note string
	// derived says in words a default the flag set cannot give: worked out
	// when pyrun starts (the flag's zero value stands for it) or, with
	// machine, from the machine the docs are generated on.
	derived string
	machine bool
	// example is the example config's value, as JSON, where it is not the
	// default (a service's, not a user's).
	example string
}

// configGroups places every flag in one group. A flag in none fails
// TestConfigurationPage: add it where a reader would look for it.
var configGroups = []configGroup{
	{"Pool and calls", "[The tool](tool.md), [limits](security.md#limits-no-call-starves-the-others-or-takes-pyrun-down)", forCalls, []flagRow{
		{name: "workers", example: "2", derived: "the number of CPUs, at least 2", machine: true, note: "warm pool size: Deno workers kept ready, each runs one call at a time (default: number of CPUs, at least 2)"},
		{name: "timeout", note: "per-call wall-clock limit, and the cap on a call's own timeout_seconds"},
		{name: "memory-limit", note: "memory limit per worker; a call past it ends with memory-error and its worker is replaced"},
		{name: "max-output", note: "cap on each of stdout, stderr and the return value of one call; the rest is cut with a visible marker"},
		{name: "max-code", note: "largest python_code accepted, and largest global_variables as JSON"},
		{name: "max-input-files", note: "entries a call's files argument may hold; a call with more gets a tool error naming this limit"},
		{name: "max-queue", derived: "64 per worker", note: "calls that may wait for a free worker; more are refused at once as busy (0: 64 per worker)"},
		{name: "queue-timeout", note: "longest a call waits for a free worker before it is refused as busy"},
		{name: "isolation", note: "call: fresh globals, files and modules per call on a reused worker; process: every call on a worker that never ran code, discarded afterwards"},
		{name: "client-max-workers", note: "workers of a language one client may own while other clients own some or wait: a worker that ran a client's call runs no other client's; a client alone may own the whole pool (0: half the pool, rounded up, at least 1)"},
		{name: "client-worker-idle", note: "a client's worker unused this long is retired; its next call takes a fresh one"},
		{name: "live-buffer", note: "per call, output waiting to be sent to a slow client as log messages; what does not fit is left out of the live stream, never out of the result"},
		{name: "progress-interval", note: "gap between two progress notifications of a call whose request carries a progress token"},
	}},
	{"Packages", "[Packages](packages.md)", forSetup, []flagRow{
		{name: "deps", note: "packages every worker loads before it takes a call (PEP 508 requirements: \"numpy\", \"attrs==23.2\"), so calls pay nothing to import them; a change replaces the workers"},
		{name: "package-index", derived: "the CDN of the pinned Pyodide", note: "where Pyodide's packages come from: a URL, or a directory laid out like the Pyodide distribution (a pyodide-lock.json and the files it lists) for machines without a network (empty: the CDN of the pinned Pyodide version)"},
		{name: "wheelhouse", note: "a directory of wheels (pure Python, or built for Pyodide) that calls may import or require by name and version (empty: none)"},
		{name: "pypi", note: "PyPI's JSON API (or a mirror's: devpi, Artifactory, Nexus), asked for PEP 723 requirements and dependencies that neither the package index nor the wheelhouse has; pyrun takes pure-Python wheels from it, checked against PyPI's SHA-256 (none: never ask)"},
	}},
	{"The sandbox and what a worker may hold", "[Security model](security.md)", forSetup, []flagRow{
		{name: "network", note: "what Python may reach: none, packages (the package index only), public (the internet without loopback, private, link-local or cloud-metadata addresses) or all"},
		{name: "os-sandbox", restart: true, note: "the OS sandbox around every worker process, below Deno's permissions: seccomp, Landlock, an empty network namespace where the worker may reach no network, no_new_privs, resource limits. auto: every layer the machine offers, with a warning at start naming each missing one; required: refuse to start without seccomp and Landlock; off: none. pyrun warmup and /healthz say which layers are in force"},
		{name: "worker-open-files", note: "files a worker process may hold open (RLIMIT_NOFILE, set by the OS sandbox); past it, opening one more fails in the call"},
		{name: "worker-file-size", note: "largest file a worker may write, in a :rw mount (RLIMIT_FSIZE, set by the OS sandbox); a write past it fails in the call with 'File too large'"},
		{name: "max-worker-threads", note: "threads a worker process may have (it has 10-14 of its own; JavaScript Worker threads made through import js count); past it the worker is killed and replaced, and the call ends crashed. Size systemd's TasksMax from it (configs/pyrun.service)"},
		{name: "idle-cpu", note: "share of one CPU an idle worker may use over a second (a fresh one uses none once its warming calls are done); a worker past it, running code a call left behind, is replaced; a session's worker may use as much over 10s between its calls, and past it the session ends"},
		{name: "idle-memory-slack", derived: "a quarter of the memory limit, at least 64MiB", note: "resident memory a worker may hold after a call beyond what it held fresh (a deleted big file, a grown heap); past it the worker is replaced so the next call has the full memory_limit (0: a quarter of memory_limit, at least 64MiB)"},
		{name: "warm-calls", note: "calls of its own a fresh Python worker runs while it waits for its first call (tiny snippets, their output dropped, about half a core for a second or two), so that V8 has compiled Pyodide's hot code by then and that call runs at full speed; 0: none. Pool workers under isolation process never warm"},
		{name: "worker-log-per-call", note: "bytes of worker stderr (js.console.log, os.write(2)) that reach pyrun's log per call, control characters escaped; the rest is counted in one line"},
		{name: "worker-log-rate", note: "bytes of worker stderr that reach pyrun's log a second, for all workers together"},
		{name: "runtime-dir", restart: true, derived: "`~/.cache/pyrun`", machine: true, note: "where Deno and Pyodide are installed (empty: ~/.cache/pyrun, or $XDG_CACHE_HOME/pyrun)"},
	}},
	{"Sessions", "[Sessions](sessions.md)", forServices, []flagRow{
		{name: "session-idle", note: "a Python session (run_python_code's session_id) ends after this long without a call; a reload applies to open sessions too"},
		{name: "session-max-age", note: "a Python session ends this long after it started"},
		{name: "max-sessions", note: "sessions open at once, per language; over it, session_id \"new\" is refused. A reload ends no open session"},
		{name: "client-max-sessions", note: "serve, with credentials: sessions one client may have open at once, per language"},
		{name: "session-spares", note: "workers started ahead for new Python sessions (with session_worker shared: from pyrun's start, for a client's first session), so that session_id \"new\" does not wait for a worker start (each a worker's memory while it waits; dropped after session_idle unused; 0: none)"},
		{name: "session-worker", restart: true, note: "where Python and JavaScript sessions live: \"shared\" (namespaces on session workers of their client's only, which share the worker's interpreter: its modules, event loop and tasks) or \"own\" (a worker per session, for untrusted users behind one client's credentials); R sessions always have a worker of their own"},
		{name: "sessions-per-worker", restart: true, note: "with session_worker shared: Python or JavaScript sessions one session worker holds at most"},
		{name: "max-session-workers", note: "worker processes for sessions at once, per language, spares included (memory_limit each); with own session workers also the most sessions. Memory and tasks are sized for workers + max_session_workers workers per language (configs/pyrun.service, configs/kubernetes/statefulset.yaml)"},
		{name: "client-max-session-workers", note: "with session_worker shared and credentials: session workers one client's sessions may hold at once, per language, those restored from checkpoints included (a restored session has a worker of its own), so that one client never holds every one (0: half of max_session_workers, rounded up)"},
		{name: "instance-id", restart: true, derived: "the host name", note: "this pyrun's name (letters, digits and -), the start of every session id it mints, so that a load balancer can route a session's calls to it (empty: the host name, reduced to those characters)"},
		{name: "session-store", example: `"dir:/var/lib/pyrun/sessions"`, derived: "`dir:` and pyrun's state folder, `$XDG_STATE_HOME/pyrun/sessions` or `~/.local/state/pyrun/sessions`", machine: true, note: "where Python sessions' checkpoints are kept (dir:PATH, redis://HOST:PORT/DB, or none), so that a session whose worker is lost continues from its last checkpoint instead of ending (default: dir: and pyrun's state folder, ~/.local/state/pyrun/sessions)"},
		{name: "session-store-key-file", restart: true, note: "the key that authenticates the session store's checkpoints (a file of at least 32 bytes, e.g. openssl rand -hex 32); required with redis://, which every instance sharing it must have; a dir: store without one makes its own (.key in its folder)"},
		{name: "checkpoint-delay", note: "a session's checkpoint is taken this long after a call's result, off the call's path"},
		{name: "max-checkpoint", note: "largest checkpoint of a session (memory and files before compression); a larger session is not checkpointed"},
		{name: "restore-spares", note: "worker processes started ahead for restores from checkpoints (a lost worker, a restart, a move, a fork), once a session took one, so that a restore does not wait for a worker start (each about a Deno process's memory while it waits; 0: none)"},
		{name: "session-lease", restart: true, note: "with a session_store several instances share, how long an instance's hold on a session lasts unless renewed (it renews it while it serves the session): how long a session of an instance that died waits before another can take it over"},
		{name: "session-move-wait", restart: true, note: "with a shared session_store, how long a call for a session another live instance serves waits for it to hand the session over before it fails with an error that says to retry"},
	}},
	{"Rich results and files", "[Rich results](rich-results.md)", forCalls, []flagRow{
		{name: "max-displays", note: "displays one call returns (display(), a rich last expression, matplotlib figures, image files under /output/); more are dropped with a note in the text"},
		{name: "max-display-bytes", note: "bytes of displays one call returns; more are dropped with a note in the text"},
		{name: "output-ttl", note: "how long the files a call wrote under /output/ stay readable with resources/read, by the client that ran the call"},
		{name: "output-store", note: "bytes of /output/ files pyrun holds for resources/read, and the most one call returns; the oldest files are dropped first"},
		{name: "output-store-files", note: "/output/ files pyrun holds for resources/read, and the most one call returns; the oldest are dropped first"},
		{name: "output-dir", restart: true, derived: "the system's temporary directory", note: "the directory in which pyrun keeps calls' /output/ files on disk, never in its memory: a folder of its own, made at start and removed at exit (empty: the system's temporary directory; under systemd's PrivateTmp a private one). Put it on a disk, not a tmpfs, where /tmp is one"},
		{name: "mount", restart: true, note: "host folders every call sees, as HOST_DIR:SANDBOX_DIR (read-only: writes fail) or HOST_DIR:SANDBOX_DIR:rw (writable, logged as a warning at start)"},
		{name: "out", note: "run: a directory where pyrun run saves the call's displays and /output/ files (empty: not saved)"},
		{name: "app-cell-bytes", note: "bytes of sessions' code pyrun keeps, all sessions together, for clients that show its MCP App: the view of a session's call lists the session's earlier cells; the oldest are dropped first (0: none)"},
	}},
	{"Languages", "[Languages](languages.md)", forSetup, []flagRow{
		{name: "languages", restart: true, note: "languages served, a tool and a pool each: python (run_python_code), r (run_r_code), javascript (run_javascript_code)"},
		{name: "r-workers", note: "warm pool size of R workers, with languages r"},
		{name: "js-workers", note: "warm pool size of JavaScript workers, with languages javascript"},
		{name: "r-memory-limit", note: "memory limit per R worker; webR idles at 300-440MB and reaches 530-630MB after its first plots"},
		{name: "js-memory-limit", note: "memory limit per JavaScript worker"},
		{name: "language", note: "pyrun run: the language of the file it runs (python, r, javascript)"},
	}},
	{"Code mode", "[Code mode](code-mode.md)", forCalls, []flagRow{
		{name: "mcp-servers", note: "code mode: MCP servers whose tools Python may call (import mcp_tools), in the shape of Claude Desktop's mcpServers: per name {command, args, env} for a server pyrun starts or {url, headers} for Streamable HTTP, plus allow (the tool names code may call; none by default) and timeout (per tool call, default 30s). Example: {\"memory\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"], \"allow\": [\"read_graph\"]}}. Credentials in env and headers stay in pyrun"},
		{name: "max-tool-calls", note: "code mode: tool calls one run may make, refused ones included"},
		{name: "tool-concurrency", note: "code mode: tool calls of one run in progress at once (asyncio.gather)"},
		{name: "max-tool-listing", note: "code mode: size of the list of functions in run_python_code's description; a longer list is summarised (help() in Python shows all)"},
		{name: "max-tool-message", note: "code mode: largest message pyrun reads from an MCP server; a larger or broken one fails only the tool call it answers, and the connection every run shares is kept"},
	}},
	{"The HTTP service", "[Serving over HTTP](operations.md#serving-over-http)", []string{"serve"}, []flagRow{
		{name: "listen", restart: true, note: "serve: the address to listen on; loopback addresses only"},
		{name: "stateless", restart: true, note: "serve: answer /mcp without sessions, so any replica behind a load balancer can take any request"},
		{name: "session-timeout", restart: true, note: "serve: close a /mcp session after this long without a request from its client"},
		{name: "keep-alive", restart: true, note: "serve: send a comment line on quiet event streams this often, so clients and proxies that drop idle streams keep long calls (0s: never)"},
		{name: "drain-timeout", derived: "the timeout plus 5s", note: "serve: on SIGTERM or SIGINT, how long running calls may take to finish before they are stopped (0s: the timeout plus 5s)"},
	}},
	{"Access control", "[Access control](operations.md#access-control-sharing-pyrun)", []string{"serve"}, []flagRow{
		{name: "auth-token-file", restart: true, note: "serve: file of bearer tokens, one client a line as name:token (# comments, blank lines); clients send Authorization: Bearer <token>. pyrun re-reads it when it changes; a file that does not check is rejected and the tokens in force stay. Empty: no tokens. Without any credentials pyrun listens only on loopback"},
		{name: "auth-issuer", restart: true, note: "serve: OAuth authorization server (issuer URL, https) whose JWT access tokens are accepted; pyrun then publishes OAuth protected resource metadata pointing at it. Empty: no JWTs"},
		{name: "auth-audience", restart: true, derived: "the resource URLs", note: "serve: audiences a JWT's aud must hold one of (empty: public_url + /mcp, public_url + /sse, public_url)"},
		{name: "auth-jwks-url", restart: true, derived: "from the issuer's metadata", note: "serve: where the issuer publishes its signing keys (empty: the jwks_uri of the issuer's metadata)"},
		{name: "public-url", restart: true, derived: "`http://` and the listen address", note: "serve: the URL clients reach pyrun at (https://pyrun.example.com), for the OAuth metadata and the default audiences (empty: http:// and the listen address, loopback only)"},
		{name: "metrics-auth", restart: true, note: "serve: with credentials configured, /metrics needs a token too (Prometheus: authorization.credentials_file); false leaves it open"},
		{name: "insecure-no-auth", restart: true, note: "serve: listen beyond loopback without credentials, logged as a warning: anyone who reaches pyrun runs code. Only for a trusted, isolated network"},
		{name: "client-max-calls", derived: "the pool size", note: "serve, with credentials: calls one client (token name or JWT subject) may have running or waiting for a worker at once, its calls in sessions included (0: the pool size)"},
		{name: "client-max-queue", note: "serve, with credentials: more calls of one client that may wait for those places (each at most queue_timeout); more get a 'busy for this client' error at once"},
		{name: "metrics-max-clients", note: "clients named in pyrun_client_workers and /healthz's workers_by_client, the first by name; the rest count as other"},
	}},
	{"What one client can hold", "[What one client can hold](security.md#what-one-client-can-hold)", forServices, []flagRow{
		{name: "write-timeout", note: "Longest one write to an HTTP client may take; a stream that does not drain is closed."},
		{name: "session-pending-results", note: "Results that may wait to be written to one session; past it, calls are refused (stdio: no more requests are read)."},
		{name: "session-pending-bytes", note: "Bytes of results that may wait to be written to one session."},
		{name: "client-pending-bytes", note: "Bytes of results that may wait to be written to all of one client's sessions."},
		{name: "max-request-bytes", derived: "`64MiB`, or four times client-max-request-bytes if more", note: "bytes of requests pyrun holds at once for all clients: request bodies from their first byte, and the arguments of calls in flight until their results are out; a request past it is refused before it is decoded (0: 64MiB, or four times client_max_request_bytes if more)"},
		{name: "client-max-request-bytes", derived: "`16MiB`, or two of the largest request bodies if more", note: "the same for one client (token, or IP address); a request past it gets a 'pyrun is busy for this client' error with its own id; on stdio pyrun reads no more requests until calls end (0: 16MiB, or two of the largest request bodies if more)"},
		{name: "go-memory-limit", derived: "derived from the other limits ([how](security.md#what-one-client-can-hold))", note: "soft limit on pyrun's own Go heap, so that it collects its garbage before it grows past what the other limits let clients make it hold (0: derived from them: 128MiB, three times max_request_bytes, and per worker of the pools and sessions twice max_display_bytes and 32 times max_output; the environment's GOMEMLIMIT wins)"},
		{name: "max-mcp-sessions", restart: true, note: "serve: MCP sessions (Streamable HTTP and HTTP+SSE) open at once; more are refused."},
		{name: "client-max-mcp-sessions", restart: true, note: "serve: MCP sessions of one client (token, or IP address); a new one closes its session idle the longest."},
		{name: "header-timeout", restart: true, note: "serve: longest a request's headers may take to arrive."},
		{name: "body-timeout", restart: true, note: "serve: longest a request's body may take to arrive, after its headers."},
		{name: "max-conns", restart: true, derived: "1024, fewer under a low open-files limit", note: "serve: HTTP connections open at once; 0: 1024, fewer under a low open-files limit (room is left for workers)."},
		{name: "max-conns-per-addr", restart: true, note: "serve: HTTP connections open at once from one IP address."},
	}},
	{"The local service", "[One service behind every stdio client](operations.md#one-service-behind-every-stdio-client)", forServices, []flagRow{
		{name: "socket", restart: true, derived: "serve: none; stdio: `$XDG_RUNTIME_DIR/pyrun.sock`, else `/run/user/UID/pyrun.sock`", note: "serve: also serve MCP on this Unix socket (owner-only; connections of other users' processes are refused, checked with SO_PEERCRED; each connection one MCP session of the local client). stdio: the service's socket to attach to. Empty: serve, none (or the one systemd passes); stdio, $XDG_RUNTIME_DIR/pyrun.sock, else /run/user/UID/pyrun.sock. default: that path, for serve too (values are not expanded: no $VARIABLES)"},
		{name: "attach", note: "stdio: auto (bridge stdin/stdout to the service on socket when it answers, else serve with a pool of its own), never, or required (fail when no service answers)"},
		{name: "max-socket-conns", restart: true, note: "serve: connections open at once on socket, each an MCP session of the local client; more are refused (closed at once, logged, counted)"},
	}},
	{"MCP tasks", "[MCP tasks](mcp.md#mcp-tasks)", forServices, []flagRow{
		{name: "task-ttl", note: "how long an MCP task's result is kept after the task ends; a client may ask for less (tasks: on stdio and the socket)"},
		{name: "client-max-tasks", note: "MCP tasks one client may hold, running or kept; past it a 2025-11-25 task-augmented call is refused, a 2026-07-28 one answered without a task"},
		{name: "client-task-bytes", note: "bytes of ended MCP tasks' results one client's tasks keep for task_ttl (their JSON); past it that client's oldest kept results are dropped, and fetching one says why"},
		{name: "task-after", note: "MCP 2026-07-28: a call of a client that takes tasks is answered with a task when it has not ended after this long (0: at once)"},
	}},
	{"Tracing", "[Tracing](operations.md#tracing)", forServices, []flagRow{
		{name: "otlp-endpoint", restart: true, note: "URL of an OpenTelemetry collector (OTLP over HTTP, http://collector:4318) to export a span of each call to; empty: no spans"},
	}},
	{"Logs and the config file", "[The config file](#the-config-file)", forAll, []flagRow{
		{name: "config", restart: true},
		{name: "log-level", note: "trace, debug, info, warn or error"},
		{name: "log-format", restart: true, note: "text or json (logs go to stderr)"},
	}},
}

// flags are the names of g's flags, in its order.
func (g configGroup) flags() []string {
	names := make([]string, len(g.rows))
	for i, r := range g.rows {
		names[i] = r.name
	}
	return names
}

// restartOnly are the settings that take effect only when pyrun starts. A
// setting is reloaded unless its row says restart.
var restartOnly = func() []string {
	var names []string
	for _, g := range configGroups {
		for _, r := range g.rows {
			if r.restart {
				names = append(names, r.name)
			}
		}
	}
	return names
}()

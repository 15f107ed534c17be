package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages"
)

// options is everything a flag or the config file can set. Flags and file
// keys share one parser: a key is the flag's name in snake_case and takes the
// flag's syntax, and a flag given on the command line wins over the file.
type options struct {
	configFile string

	workers      int
	timeout      time.Duration
	memoryLimit  byteSize
	maxOutput    byteSize
	maxCode      byteSize
	maxQueue     int
	queueTimeout time.Duration
	deps         stringList
	packageIndex string
	wheelhouse   string
	pypi         string
	network      string
	isolation    string
	runtimeDir   string

	liveBuffer       byteSize
	progressInterval time.Duration

	logLevel  string
	logFormat string

	listen         string
	stateless      bool
	sessionTimeout time.Duration
	keepAlive      time.Duration
	drainTimeout   time.Duration

	authTokenFile  string
	authIssuer     string
	authAudience   stringList
	authJWKSURL    string
	publicURL      string
	metricsAuth    bool
	insecureNoAuth bool
	clientMaxCalls int
	clientMaxQueue int

	mcpServers      serversFlag
	maxToolCalls    int
	toolConcurrency int
	maxToolListing  byteSize
}

// flagSet declares every flag on o, with its default.
func (o *options) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.memoryLimit, o.maxOutput, o.maxCode, o.liveBuffer = 512<<20, 64<<10, 1<<20, 256<<10
	o.maxToolListing = 8 << 10
	fs.StringVar(&o.configFile, "config", "", "JSON config `file`; its keys are these flags' names in snake_case")
	fs.IntVar(&o.workers, "workers", supervisor.DefaultWorkers(), "warm pool size")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "per-call wall-clock limit, and the cap on a call's timeout_seconds")
	fs.Var(&o.memoryLimit, "memory-limit", "memory limit per worker (bytes, or with a unit: 512MiB, 1GiB)")
	fs.Var(&o.maxOutput, "max-output", "cap on each of stdout, stderr and the return value, per call (bytes or 64KiB)")
	fs.Var(&o.maxCode, "max-code", "largest python_code accepted, and largest global_variables as JSON (bytes or 1MiB)")
	fs.IntVar(&o.maxQueue, "max-queue", 0, "calls that may wait for a free worker (default 64 per worker)")
	fs.DurationVar(&o.queueTimeout, "queue-timeout", 60*time.Second, "longest a call waits for a free worker")
	fs.Var(&o.deps, "deps", "comma-separated packages (PEP 508: numpy, attrs==23.2) every worker loads before it takes a call")
	fs.StringVar(&o.packageIndex, "package-index", "", "where Pyodide's packages come from: a URL or a `directory` laid out like the Pyodide distribution (default: the CDN of the pinned Pyodide version)")
	fs.StringVar(&o.pypi, "pypi", packages.DefaultPyPI, "`URL` of PyPI's JSON API (or a mirror's), for PEP 723 requirements neither the package index nor the wheelhouse has; none: never ask")
	fs.StringVar(&o.wheelhouse, "wheelhouse", "", "`directory` of wheels (pure Python, or built for Pyodide) to install from, by name and version")
	fs.StringVar(&o.network, "network", "public", "what Python may reach: none, packages, public (no private or loopback addresses) or all")
	fs.StringVar(&o.isolation, "isolation", "call", "call (fresh globals, files and modules per call) or process (a new worker per call)")
	fs.Var(&o.liveBuffer, "live-buffer", "output of one call waiting to be sent to a slow client as log messages; more is left out of the live stream, never out of the result (bytes or 256KiB)")
	fs.DurationVar(&o.progressInterval, "progress-interval", time.Second, "gap between two progress notifications of a call that has a progress token")
	fs.StringVar(&o.runtimeDir, "runtime-dir", supervisor.DefaultRuntimeRoot(), "where pyrun installs Deno and Pyodide")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3001", "serve: address to listen on")
	fs.BoolVar(&o.stateless, "stateless", false, "serve: /mcp without sessions, for load balancers")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", time.Hour, "serve: close a /mcp session after this long without a request")
	fs.DurationVar(&o.keepAlive, "keep-alive", 15*time.Second, "serve: comment line on quiet event streams this often, so long calls are not dropped (0: never)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 0, "serve: on SIGTERM, how long running calls may take to finish (default: the timeout plus 5s)")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "serve: `file` of bearer tokens, one client a line (name:token); re-read when it changes")
	fs.StringVar(&o.authIssuer, "auth-issuer", "", "serve: OAuth authorization server (issuer URL) whose JWT access tokens are accepted")
	fs.Var(&o.authAudience, "auth-audience", "serve: comma-separated audiences a JWT's aud must hold one of (default: pyrun's resource URLs, public-url/mcp and /sse)")
	fs.StringVar(&o.authJWKSURL, "auth-jwks-url", "", "serve: URL of the issuer's signing keys (JWKS) (default: jwks_uri from the issuer's metadata)")
	fs.StringVar(&o.publicURL, "public-url", "", "serve: the URL clients reach pyrun at, for OAuth metadata (default: http:// and the listen address)")
	fs.BoolVar(&o.metricsAuth, "metrics-auth", true, "serve: with access control, /metrics needs a token too")
	fs.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "serve: listen beyond loopback without access control: anyone who reaches pyrun runs code")
	fs.IntVar(&o.clientMaxCalls, "client-max-calls", 0, "serve, with access control: calls one client may have running or waiting for a worker (default: the pool size)")
	fs.IntVar(&o.clientMaxQueue, "client-max-queue", 16, "serve, with access control: more calls of one client that may wait for those places; more are refused")
	fs.Var(&o.mcpServers, "mcp-servers", "code mode: `JSON` object of MCP servers whose tools Python may call, as in Claude Desktop's mcpServers, each with \"allow\": [tool names] and \"timeout\"")
	fs.IntVar(&o.maxToolCalls, "max-tool-calls", 50, "code mode: tool calls one run may make")
	fs.IntVar(&o.toolConcurrency, "tool-concurrency", 4, "code mode: tool calls of one run in progress at once")
	fs.Var(&o.maxToolListing, "max-tool-listing", "code mode: size of the function list in the tool description; a longer one is summarised (bytes or 8KiB)")
	return fs
}

// loadOptions parses args (flags, then positional arguments) and the config
// file they name. It is pure: a reload calls it again with the same args.
func loadOptions(cmd string, args []string) (*options, []string, error) {
	o := &options{}
	fs := o.flagSet(cmd)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	rest := fs.Args()
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
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	return o, rest, nil
}

// applyConfigFile sets every flag the file names, except those in skip.
// Keys that start with "//" are comments.
func applyConfigFile(fs *flag.FlagSet, path string, skip map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for key, raw := range keys {
		if strings.HasPrefix(key, "//") {
			continue // a comment
		}
		name := strings.ReplaceAll(key, "_", "-")
		if name == "config" || fs.Lookup(name) == nil {
			return fmt.Errorf("config %s: unknown key %q", path, key)
		}
		if skip[name] {
			continue
		}
		val, err := configValue(raw)
		if err != nil {
			return fmt.Errorf("config %s: key %q: %w", path, key, err)
		}
		if err := fs.Set(name, val); err != nil {
			return fmt.Errorf("config %s: key %q: %w", path, key, err)
		}
	}
	return nil
}

// configValue turns a JSON value into the flag syntax: strings as they are,
// numbers and booleans as written, lists of strings joined by commas.
func configValue(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return string(raw), nil
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			s, ok := x.(string)
			if !ok || strings.Contains(s, ",") {
				return "", errors.New("a list must hold strings without commas")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return string(raw), nil // JSON-valued settings (mcp_servers) take it as it is
	case nil:
		return "", errors.New("null is not a value; leave the key out for the default")
	}
	return "", fmt.Errorf("unsupported value %s", raw)
}

func (o *options) check() error {
	if _, err := supervisor.ParseNetwork(o.network); err != nil {
		return err
	}
	if _, err := supervisor.ParseIsolation(o.isolation); err != nil {
		return err
	}
	switch {
	case o.workers < 1:
		return fmt.Errorf("workers must be at least 1, not %d", o.workers)
	case o.workers > 256:
		return fmt.Errorf("workers must be at most 256, not %d", o.workers)
	case o.timeout <= 0:
		return fmt.Errorf("timeout must be positive, not %s", o.timeout)
	case o.memoryLimit < 128<<20:
		return fmt.Errorf("memory-limit must be at least 128MiB, not %s", o.memoryLimit)
	case o.maxOutput < 1<<10:
		return fmt.Errorf("max-output must be at least 1KiB, not %s", o.maxOutput)
	case o.maxOutput > 64<<20:
		return fmt.Errorf("max-output must be at most 64MiB, not %s", o.maxOutput)
	case o.maxCode < 1<<10 || o.maxCode > 32<<20:
		return fmt.Errorf("max-code must be between 1KiB and 32MiB, not %s", o.maxCode)
	case o.maxQueue < 0:
		return fmt.Errorf("max-queue must not be negative, not %d", o.maxQueue)
	case o.queueTimeout <= 0:
		return fmt.Errorf("queue-timeout must be positive, not %s", o.queueTimeout)
	case o.liveBuffer < 4<<10 || o.liveBuffer > 64<<20:
		return fmt.Errorf("live-buffer must be between 4KiB and 64MiB, not %s", o.liveBuffer)
	case o.progressInterval < 100*time.Millisecond:
		return fmt.Errorf("progress-interval must be at least 100ms, not %s", o.progressInterval)
	case o.sessionTimeout <= 0:
		return fmt.Errorf("session-timeout must be positive, not %s", o.sessionTimeout)
	case o.keepAlive < 0:
		return fmt.Errorf("keep-alive must not be negative, not %s", o.keepAlive)
	case o.drainTimeout < 0:
		return fmt.Errorf("drain-timeout must not be negative, not %s", o.drainTimeout)
	case o.clientMaxCalls < 0 || o.clientMaxCalls > 4096:
		return fmt.Errorf("client-max-calls must be between 0 (the pool size) and 4096, not %d", o.clientMaxCalls)
	case o.clientMaxQueue < 0 || o.clientMaxQueue > 4096:
		return fmt.Errorf("client-max-queue must be between 0 and 4096, not %d", o.clientMaxQueue)
	case o.maxToolCalls < 1 || o.maxToolCalls > 10000:
		return fmt.Errorf("max-tool-calls must be between 1 and 10000, not %d", o.maxToolCalls)
	case o.toolConcurrency < 1 || o.toolConcurrency > 64:
		return fmt.Errorf("tool-concurrency must be between 1 and 64, not %d", o.toolConcurrency)
	case o.maxToolListing < 1<<10 || o.maxToolListing > 1<<20:
		return fmt.Errorf("max-tool-listing must be between 1KiB and 1MiB, not %s", o.maxToolListing)
	case o.authIssuer == "" && (o.authJWKSURL != "" || len(o.authAudience) > 0):
		return errors.New("auth-jwks-url and auth-audience need auth-issuer: the authorization server whose tokens to accept")
	}
	for _, d := range o.deps {
		if _, err := packages.ParseRequirement(d); err != nil {
			return fmt.Errorf("deps: %w", err)
		}
	}
	if o.wheelhouse != "" {
		if st, err := os.Stat(o.wheelhouse); err != nil || !st.IsDir() {
			return fmt.Errorf("wheelhouse %s is not a directory", o.wheelhouse)
		}
	}
	if o.pypi != "none" && !packages.IsURL(o.pypi) {
		return fmt.Errorf("pypi must be a URL or none, not %q", o.pypi)
	}
	if ix := o.packageIndex; ix != "" && !packages.IsURL(ix) {
		if _, err := os.Stat(filepath.Join(ix, "pyodide-lock.json")); err != nil {
			return fmt.Errorf("package-index %s: not a URL, and not a directory with a pyodide-lock.json", ix)
		}
	}
	if hclogLevel(o.logLevel) == 0 {
		return fmt.Errorf("log-level must be trace, debug, info, warn or error, not %q", o.logLevel)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("log-format must be text or json, not %q", o.logFormat)
	}
	return nil
}

// poolConfig is the supervisor's share of the options.
func (o *options) poolConfig() supervisor.Config {
	network, _ := supervisor.ParseNetwork(o.network)
	isolation, _ := supervisor.ParseIsolation(o.isolation)
	return supervisor.Config{
		Workers:      o.workers,
		Timeout:      o.timeout,
		MemoryLimit:  int64(o.memoryLimit),
		MaxOutput:    int(o.maxOutput),
		MaxQueue:     o.maxQueue,
		QueueTimeout: o.queueTimeout,
		Network:      network,
		Isolation:    isolation,
		Deps:         o.deps,
		PackageIndex: o.packageIndex,
		Wheelhouse:   o.wheelhouse,
		PyPI:         o.pypi,
	}
}

// byteSize is a flag holding a size: a plain number of bytes or a number
// with a unit (KB, MB, GB in powers of 1000; KiB, MiB, GiB in powers of 1024).
type byteSize int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("%q is not a size: use bytes or a unit such as 64KiB, 512MiB, 1GiB", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	v := f * float64(mult)
	if v > 1<<50 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

func (b *byteSize) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func (b byteSize) String() string {
	v := int64(b)
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v >= u.size && v%u.size == 0 {
			return fmt.Sprintf("%d%s", v/u.size, u.name)
		}
	}
	return strconv.FormatInt(v, 10)
}

// stringList is a comma-separated list flag.
type stringList []string

func (l *stringList) Set(s string) error {
	*l = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

func (l stringList) String() string { return strings.Join(l, ",") }

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
		if fs.Lookup(name) != nil {
			_ = fs.Set(name, prev[name])
		}
	}
	*o = c
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Languages (docs/languages.md): which languages pyrun serves, a pool and
// a tool each, and each language's own pool size and memory limit.

// languageSpec is what pyrun needs to know of a language besides its
// engine (supervisor) and its tool (mcp): the flags of its pool.
type languageSpec struct {
	name          string
	workersFlag   string
	memoryFlag    string
	workers       func(o *options) int
	memoryLimit   func(o *options) byteSize
	defaultMemory byteSize
}

// languageSpecs are the languages pyrun has flags for. A new language is
// one line here, its two flags in languageFlags, and its engine and tool.
var languageSpecs = []languageSpec{
	{"python", "workers", "memory-limit", func(o *options) int { return o.workers }, func(o *options) byteSize { return o.memoryLimit }, 512 << 20},
	// webR idles at 300-440 MB resident and reaches 530-630 MB after its
	// first plots (docs/architecture.md, Facts): 1 GiB leaves a call about 400 MB above that,
	// and the watchdog's ceiling (1.25 GiB) stays clear of a healthy worker.
	{"r", "r-workers", "r-memory-limit", func(o *options) int { return o.rWorkers }, func(o *options) byteSize { return o.rMemoryLimit }, 1 << 30},
	// A Deno process with one V8 isolate per call idles well under 100 MB.
	{"javascript", "js-workers", "js-memory-limit", func(o *options) int { return o.jsWorkers }, func(o *options) byteSize { return o.jsMemoryLimit }, 512 << 20},
}

// languageFlags declares --languages and the per-language pool flags.
func (o *options) languageFlags(fs *flag.FlagSet) {
	o.languages = stringList{"python"}
	o.rMemoryLimit, o.jsMemoryLimit = languageSpecs[1].defaultMemory, languageSpecs[2].defaultMemory
	fs.Var(&o.languages, "languages", "comma-separated languages to serve, a tool each: python (run_python_code), r (run_r_code), javascript (run_javascript_code)")
	fs.IntVar(&o.rWorkers, "r-workers", 1, "warm pool size of R workers (with --languages r)")
	fs.IntVar(&o.jsWorkers, "js-workers", 1, "warm pool size of JavaScript workers (with --languages javascript)")
	fs.Var(&o.rMemoryLimit, "r-memory-limit", "memory limit per R worker (webR idles at 300-440MB) (bytes or 1GiB)")
	fs.Var(&o.jsMemoryLimit, "js-memory-limit", "memory limit per JavaScript worker (bytes or 512MiB)")
	fs.StringVar(&o.runLanguage, "language", "python", "run: the language of FILE (python, r, javascript); it need not be in --languages")
}

// checkLanguages checks --languages and the per-language flags.
func (o *options) checkLanguages() error {
	if len(o.languages) == 0 {
		return fmt.Errorf("languages must name at least one language (python, r, javascript)")
	}
	seen := map[string]bool{}
	for _, name := range o.languages {
		if seen[name] {
			return fmt.Errorf("languages: %s is named twice", name)
		}
		seen[name] = true
		if _, err := languageOf(name); err != nil {
			return fmt.Errorf("languages: %w", err)
		}
	}
	if _, err := languageOf(o.runLanguage); err != nil {
		return fmt.Errorf("language: %w", err)
	}
	for _, sp := range languageSpecs {
		if n := sp.workers(o); n < 1 || n > 256 {
			return fmt.Errorf("%s must be between 1 and 256, not %d", sp.workersFlag, n)
		}
		if m := sp.memoryLimit(o); m < 128<<20 {
			return fmt.Errorf("%s must be at least 128MiB, not %s", sp.memoryFlag, m)
		}
	}
	return nil
}

// language is what pyrun runs a language with: its engine, its flags and
// its tool's description.
type language struct {
	spec   languageSpec
	engine supervisor.Engine
	tool   mcp.Language
}

// languageOf is the language of a name, or why pyrun cannot run it.
func languageOf(name string) (language, error) {
	if name == "julia" {
		return language{}, fmt.Errorf("julia cannot be served: Julia has no WebAssembly build to run in a sandbox")
	}
	eng, err := supervisor.EngineNamed(name)
	if err != nil {
		return language{}, err
	}
	i := slices.IndexFunc(languageSpecs, func(sp languageSpec) bool { return sp.name == name })
	tool, ok := mcp.LanguageNamed(name)
	if i < 0 || !ok {
		return language{}, fmt.Errorf("language %q has an engine but no flags or tool in this pyrun", name)
	}
	return language{spec: languageSpecs[i], engine: eng, tool: tool}, nil
}

// enabledLanguages are the languages of --languages, in its order.
func (o *options) enabledLanguages() []language {
	var langs []language
	for _, name := range o.languages {
		l, err := languageOf(name) // checked by check
		if err == nil {
			langs = append(langs, l)
		}
	}
	return langs
}

// languageConfig is the pool configuration of a language: poolConfig with
// the language's own size and memory limit.
func (o *options) languageConfig(l language) supervisor.Config {
	cfg := o.poolConfig()
	cfg.Workers = l.spec.workers(o)
	cfg.MemoryLimit = int64(l.spec.memoryLimit(o))
	return cfg
}

// mcpLanguages are the tools' descriptions, with their versions from rt.
func (o *options) mcpLanguages(rt *supervisor.Runtime) []mcp.Language {
	var tools []mcp.Language
	for _, l := range o.enabledLanguages() {
		t := l.tool
		t.Versions = l.engine.Versions(rt)
		tools = append(tools, t)
	}
	return tools
}

// startPools provisions the runtime and starts a pool per language.
// workers, when positive, sizes every pool (pyrun run needs one worker).
func startPools(ctx context.Context, o *options, langs []language, workers int, progress io.Writer, log hclog.Logger) (*supervisor.Runtime, *supervisor.Pools, error) {
	rt, err := supervisor.Provision(ctx, o.runtimeDir, progress, log)
	if err != nil {
		return nil, nil, err
	}
	if _, err := checkOSSandbox(o, log); err != nil {
		return nil, nil, err
	}
	for _, m := range o.poolConfig().Mounts {
		if m.RW {
			log.Warn("a host folder is mounted read-write: code run by any client can change, add and delete files in it",
				"host", m.Host, "sandbox", m.Path)
		}
	}
	var pools []*supervisor.Pool
	stop := func() {
		for _, p := range pools {
			closePool(p, log)
		}
	}
	for _, l := range langs {
		cfg := o.languageConfig(l)
		if workers > 0 {
			cfg.Workers = workers
		}
		name := "pool"
		if l.engine != supervisor.Python {
			name = "pool-" + l.engine.Name()
		}
		p, err := supervisor.NewEnginePool(rt, l.engine, cfg, log.Named(name))
		if err != nil {
			stop()
			return nil, nil, err
		}
		pools = append(pools, p)
	}
	ps, err := supervisor.NewPools(pools...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return rt, ps, nil
}

// closePools lets running calls finish, within a bound, and stops every
// language's workers.
func closePools(ps *supervisor.Pools, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), poolsTimeout(ps)+5*time.Second)
	defer cancel()
	if err := ps.Close(ctx); err != nil {
		log.Warn("stopping workers", "error", err)
	}
}

// poolsTimeout is the longest call limit of the pools.
func poolsTimeout(ps *supervisor.Pools) time.Duration {
	var d time.Duration
	for _, name := range ps.Languages() {
		d = max(d, ps.Pool(name).Config().Timeout)
	}
	return d
}

// reconfigurePools applies o to every language's pool.
func reconfigurePools(ps *supervisor.Pools, o *options) error {
	for _, l := range o.enabledLanguages() {
		if p := ps.Pool(l.engine.Name()); p != nil {
			if err := p.Reconfigure(o.languageConfig(l)); err != nil {
				return fmt.Errorf("%s: %w", l.engine.Name(), err)
			}
		}
	}
	return nil
}

// startLanguageSessions keeps each language's sessions on workers its pool
// starts for them.
func startLanguageSessions(o *options, ps *supervisor.Pools, log hclog.Logger) *sessions.Languages {
	var names []string
	var managers []*sessions.Manager
	for _, name := range ps.Languages() {
		named := log
		if name != supervisor.Python.Name() {
			named = log.Named(name)
		}
		names = append(names, name)
		managers = append(managers, startSessions(o, ps.Pool(name), named))
	}
	l, _ := sessions.NewLanguages(names, managers) // one manager per pool, named as they are
	return l
}

// closeLanguageSessions lets running session calls finish, within the
// bound the pools' calls get, and ends every session.
func closeLanguageSessions(l *sessions.Languages, ps *supervisor.Pools, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), poolsTimeout(ps)+5*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		log.Warn("ending sessions", "error", err)
	}
}

// openSessions are the open sessions of each language.
func openSessions(l *sessions.Languages, langs []string) map[string]int {
	m := map[string]int{}
	for _, name := range langs {
		m[name] = l.Manager(name).Stats().Open
	}
	return m
}

// printEngines lists every language pyrun has flags for: its tool and the
// versions its engine runs, or that this build has no engine for it.
func printEngines(w io.Writer, rt *supervisor.Runtime) {
	for _, sp := range languageSpecs {
		l, err := languageOf(sp.name)
		if err != nil {
			fmt.Fprintf(w, "language %s: not built into this pyrun\n", sp.name)
			continue
		}
		v := l.engine.Versions(rt)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, k+" "+v[k])
		}
		fmt.Fprintf(w, "language %s: %s, %s\n", sp.name, l.tool.Tool, strings.Join(parts, ", "))
	}
}

// warmupLanguage is `pyrun warmup`'s step for a language other than
// Python: a worker of it starts and runs an empty call.
func warmupLanguage(o *options, l language, rt **supervisor.Runtime, log hclog.Logger) warmupStep {
	return warmupStep{l.engine.Name(), func(ctx context.Context) (string, error) {
		cfg := o.languageConfig(l)
		cfg.Workers = 1
		began := time.Now()
		p, err := supervisor.NewEnginePool(*rt, l.engine, cfg, log.Named("pool-"+l.engine.Name()))
		if err != nil {
			return "", err
		}
		defer closePool(p, log)
		res, err := p.Run(ctx, supervisor.Job{ID: "warmup", Client: "warmup", Language: l.engine.Name()}, nil)
		switch {
		case err != nil && res.Status == "":
			return "", fmt.Errorf("no %s worker could take a call: %w", l.tool.Title, err)
		case res.Status != supervisor.StatusSuccess:
			return "", fmt.Errorf("an empty %s call ended %s: %s", l.tool.Title, res.Status, res.Error)
		}
		v := l.engine.Versions(*rt)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, k+" "+v[k])
		}
		return fmt.Sprintf("%s worker ready and ran a call in %s (%s)", l.tool.Title,
			time.Since(began).Round(time.Millisecond), strings.Join(parts, ", ")), nil
	}}
}

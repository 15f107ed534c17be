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

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Languages (docs/languages.md): which languages pyrun serves, a pool and
// a tool each, and each language's own pool size and memory limit. All of
// it is made from the languages' registrations (package lang).

// poolFlags are one language's pool flags: --workers and --memory-limit
// for the first language, --<prefix>-workers and --<prefix>-memory-limit
// for the others (lang.Language's WorkersFlag and MemoryFlag).
type poolFlags struct {
	workers     int
	memoryLimit byteSize
}

// pool is l's pool flags.
func (o *options) pool(l lang.Language) poolFlags { return o.pools[lang.Index(l)] }

// languageFlags declares --languages, --language and every language's pool
// flags.
func (o *options) languageFlags(fs *flag.FlagSet) {
	o.languages = stringList{lang.Python.ID}
	var tools []string
	for i, l := range lang.All() {
		p := &o.pools[i]
		p.memoryLimit = byteSize(l.Engine.DefaultMemoryLimit())
		workers, memory := "warm pool size", "memory limit per worker (bytes, or with a unit: 512MiB, 1GiB)"
		if l.FlagPrefix != "" {
			workers = fmt.Sprintf("warm pool size of %s workers (with --languages %s)", l.Title, l.ID)
			memory = fmt.Sprintf("memory limit per %s worker (bytes or %s)", l.Title, p.memoryLimit)
		}
		fs.IntVar(&p.workers, l.WorkersFlag(), l.DefaultWorkers(), workers)
		fs.Var(&p.memoryLimit, l.MemoryFlag(), memory)
		tools = append(tools, fmt.Sprintf("%s (%s)", l.ID, l.Tool(nil).Tool))
	}
	ids := strings.Join(lang.IDs(), ", ")
	fs.Var(&o.languages, "languages", "comma-separated languages to serve, a tool each: "+strings.Join(tools, ", "))
	fs.StringVar(&o.runLanguage, "language", lang.Python.ID, "run: the language of FILE ("+ids+"); it need not be in --languages")
}

// checkLanguages checks --languages and the per-language flags.
func (o *options) checkLanguages() error {
	if len(o.languages) == 0 {
		return fmt.Errorf("languages must name at least one language (%s)", strings.Join(lang.IDs(), ", "))
	}
	seen := map[string]bool{}
	for _, name := range o.languages {
		if seen[name] {
			return fmt.Errorf("languages: %s is named twice", name)
		}
		seen[name] = true
		if _, err := lang.Named(name); err != nil {
			return fmt.Errorf("languages: %w", err)
		}
	}
	if _, err := lang.Named(o.runLanguage); err != nil {
		return fmt.Errorf("language: %w", err)
	}
	for _, l := range lang.All() {
		if err := outside(l.WorkersFlag(), o.pool(l).workers, 1, 256); err != nil {
			return err
		}
		if m := o.pool(l).memoryLimit; m < 128<<20 {
			return fmt.Errorf("%s must be at least 128MiB, not %s", l.MemoryFlag(), m)
		}
	}
	return nil
}

// enabledLanguages are the languages of --languages, in its order.
func (o *options) enabledLanguages() []lang.Language {
	var langs []lang.Language
	for _, name := range o.languages {
		if l, err := lang.Named(name); err == nil { // checked by check
			langs = append(langs, l)
		}
	}
	return langs
}

// mcpLanguages are the tools' descriptions, with their versions from rt.
func (o *options) mcpLanguages(rt *supervisor.Runtime) []mcp.Language {
	var tools []mcp.Language
	for _, l := range o.enabledLanguages() {
		tools = append(tools, l.Tool(l.Engine.Versions(rt)))
	}
	return tools
}

// disabledLanguages are the tools of the languages --languages leaves
// out, so that a call of one is told how to turn it on.
func (o *options) disabledLanguages() []mcp.Language {
	var off []mcp.Language
	for _, l := range lang.All() {
		if !slices.Contains(o.languages, l.ID) {
			off = append(off, l.Tool(nil))
		}
	}
	return off
}

// provision installs or opens the runtime, checks the OS sandbox and warns
// of read-write mounts: what comes before any worker starts.
func provision(ctx context.Context, o *options, progress io.Writer, log hclog.Logger) (*supervisor.Runtime, error) {
	rt, err := supervisor.Provision(ctx, o.runtimeDir, progress, log)
	if err != nil {
		return nil, err
	}
	if _, err := checkOSSandbox(o, log); err != nil {
		return nil, err
	}
	for _, m := range o.supervisor.Mounts {
		if m.RW {
			log.Warn("a host folder is mounted read-write: code run by any client can change, add and delete files in it",
				"host", m.Host, "sandbox", m.Path)
		}
	}
	return rt, nil
}

// startPools starts a pool per language on rt. workers, when positive,
// sizes every pool (pyrun run needs one worker).
func startPools(rt *supervisor.Runtime, o *options, langs []lang.Language, workers int, log hclog.Logger) (*supervisor.Pools, error) {
	var pools []*supervisor.Pool
	stop := func() {
		for _, p := range pools {
			closePool(p, log)
		}
	}
	for _, l := range langs {
		cfg := o.poolConfig(l)
		if workers > 0 {
			cfg.Workers = workers
		}
		p, err := supervisor.NewEnginePool(rt, l.Engine, cfg, log.Named(poolLog(l)))
		if err != nil {
			stop()
			return nil, err
		}
		pools = append(pools, p)
	}
	ps, err := supervisor.NewPools(pools...)
	if err != nil {
		stop()
		return nil, err
	}
	return ps, nil
}

// poolLog names a language's pool in the log: the first language's, the
// one pyrun had before it had others, plainly "pool".
func poolLog(l lang.Language) string {
	if lang.Index(l) == 0 {
		return "pool"
	}
	return "pool-" + l.ID
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
		if p := ps.Pool(l.ID); p != nil {
			if err := p.Reconfigure(o.poolConfig(l)); err != nil {
				return fmt.Errorf("%s: %w", l.ID, err)
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
		l, err := lang.Named(name)
		if err != nil {
			continue // a pool of every language started (startPools)
		}
		named := log
		if lang.Index(l) > 0 {
			named = log.Named(name) // as poolLog
		}
		names = append(names, name)
		managers = append(managers, startSessions(o, l, ps.Pool(name), named))
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

// printEngines lists every language: its tool and the versions its engine
// runs.
func printEngines(w io.Writer, rt *supervisor.Runtime) {
	for _, l := range lang.All() {
		fmt.Fprintf(w, "language %s: %s, %s\n", l.ID, l.Tool(nil).Tool, versionList(l.Engine.Versions(rt)))
	}
}

// versionList writes versions as "name version, ...", by name.
func versionList(v map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(v)) {
		parts = append(parts, k+" "+v[k])
	}
	return strings.Join(parts, ", ")
}

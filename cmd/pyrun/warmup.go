package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages"
)

// warmupStep is one check of `pyrun warmup`: it returns what it found.
type warmupStep struct {
	name string
	run  func(ctx context.Context) (string, error)
}

// cmdWarmup provisions the runtime, starts a worker and runs self-test
// calls, printing each step with its result. The first failure stops it
// with an error that says what is missing.
func cmdWarmup(ctx context.Context, o *options, stdout, stderr io.Writer, log hclog.Logger) error {
	var (
		rt   *supervisor.Runtime
		d    *daemon          // the worker step's
		pool *supervisor.Pool // its Python pool
	)
	defer func() {
		if d != nil {
			d.Close()
		}
	}()
	call := func(ctx context.Context, code string, timeout time.Duration) (supervisor.Result, error) {
		res, err := pool.Run(ctx, supervisor.Job{ID: "warmup", Code: code, Timeout: timeout, Client: "warmup"}, nil)
		if err != nil && res.Status == "" {
			return res, err
		}
		return res, nil
	}
	steps := []warmupStep{
		{"runtime", func(ctx context.Context) (string, error) {
			if r, err := supervisor.OpenRuntime(o.runtimeDir); err == nil {
				rt = r
				return rt.Dir, nil
			} else {
				fmt.Fprintf(stdout, "  %-10s installing Deno and Pyodide from npm (%v)\n", "", err)
			}
			r, err := supervisor.Provision(ctx, o.runtimeDir, stderr, log)
			if errors.Is(err, supervisor.ErrNoNPM) {
				dir, _ := supervisor.RuntimeDir(o.runtimeDir)
				return "", fmt.Errorf("Deno and Pyodide are not installed in %s and npm is not on PATH to install them: install Node.js and npm, or copy a runtime folder from a machine where pyrun warmup passed", dir)
			}
			if err != nil {
				return "", err
			}
			rt = r
			return rt.Dir + " (installed now)", nil
		}},
		{"deno", func(ctx context.Context) (string, error) {
			v, err := rt.DenoVersion(ctx)
			if err != nil {
				return "", fmt.Errorf("the Deno binary %s does not run: %w", rt.Deno, err)
			}
			return "deno " + v, nil
		}},
		{"os sandbox", func(context.Context) (string, error) {
			st, err := checkOSSandbox(o, log)
			if err != nil {
				return "", err
			}
			return describeOSSandbox(st), nil
		}},
	}
	python := []warmupStep{
		{"pyodide", func(context.Context) (string, error) {
			dir := filepath.Join(rt.Dir, "node_modules", "pyodide")
			var missing []string
			for _, f := range []string{"pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					missing = append(missing, f)
				}
			}
			if len(missing) > 0 {
				return "", fmt.Errorf("Pyodide's files are missing from %s: %s; remove %s and run pyrun warmup again to reinstall",
					dir, strings.Join(missing, ", "), rt.Dir)
			}
			return fmt.Sprintf("Pyodide %s, Python %s", rt.Pyodide, rt.Python), nil
		}},
		{"snapshot", func(ctx context.Context) (string, error) {
			snap, err := supervisor.EnsureSnapshot(ctx, rt, o.poolConfig(), log.Named("snapshot"))
			if err != nil {
				return "", fmt.Errorf("the memory snapshot workers start from could not be made (they would start, slowly, without it): %w", err)
			}
			if snap.Built {
				return fmt.Sprintf("%s (%d MiB), made now in %s", snap.Path, snap.Size>>20, snap.BuildTime.Round(100*time.Millisecond)), nil
			}
			return fmt.Sprintf("%s (%d MiB), checked", snap.Path, snap.Size>>20), nil
		}},
		{"packages", func(ctx context.Context) (string, error) {
			cfg := o.poolConfig()
			pkgs, err := supervisor.NewResolver(rt, cfg, log.Named("packages"))
			if err != nil {
				return "", err
			}
			detail := fmt.Sprintf("no deps to preload; calls load what they import from %s", pkgs.Index())
			if len(cfg.Deps) > 0 {
				files, err := pkgs.Resolve(ctx, packages.Request{Requires: cfg.Deps, By: "deps"})
				if err != nil {
					return "", fmt.Errorf("the deps cannot be had, so no worker could start: %w", err)
				}
				var names []string
				for _, f := range files {
					names = append(names, f.Name+" "+f.Version)
				}
				detail = fmt.Sprintf("cached %s in %s", strings.Join(names, ", "), rt.PackageDir)
			}
			return reachDetail(ctx, pkgs, cfg.Network, detail)
		}},
		{"worker", func(ctx context.Context) (string, error) {
			var err error
			d, err = newDaemon(ctx, o, daemonParts{runtime: rt, languages: []lang.Language{lang.Python}, workers: 1}, log)
			if err != nil {
				return "", err
			}
			pool = d.pools.Pool(lang.Python.ID)
			res, err := call(ctx, "None", 0)
			if err != nil {
				return "", err
			}
			if res.Status != supervisor.StatusSuccess {
				return "", fmt.Errorf("the first call ended %s: %s", res.Status, res.Error)
			}
			if pool.Stats().Counts.Starts["snapshot"] == 0 {
				return "", errors.New("the worker started without the memory snapshot; the log above says why")
			}
			return fmt.Sprintf("%s ready after %s, from the snapshot", res.Worker, res.QueueWait.Round(time.Millisecond)), nil
		}},
		{"self-test", func(ctx context.Context) (string, error) {
			res, err := call(ctx, "import sys\nprint('hello')\nsum(range(10))", 0)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusSuccess:
				return "", fmt.Errorf("a test call ended %s: %s", res.Status, res.Error)
			case res.Stdout != "hello\n" || res.Value != "45":
				return "", fmt.Errorf("a test call printed %q and returned %s, want \"hello\\n\" and 45", res.Stdout, res.Value)
			}
			return fmt.Sprintf("print and return value (%s)", res.Duration.Round(time.Millisecond)), nil
		}},
		{"sandbox", func(ctx context.Context) (string, error) {
			res, err := call(ctx, "import js\ntry:\n    js.Deno.readTextFileSync('/etc/passwd')\n    leaked = True\nexcept Exception:\n    leaked = False\nleaked", 0)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusSuccess:
				return "", fmt.Errorf("the sandbox test ended %s: %s", res.Status, res.Error)
			case res.Value != "false":
				return "", errors.New("Python could read /etc/passwd through Deno: the worker's permissions are too wide")
			}
			return "host files are out of reach", nil
		}},
		{"interrupt", func(ctx context.Context) (string, error) {
			began := time.Now()
			res, err := call(ctx, "while True:\n    pass", time.Second)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusTimeout:
				return "", fmt.Errorf("a runaway loop with a 1s limit ended %s, want timeout: %s", res.Status, res.Error)
			}
			return fmt.Sprintf("a runaway loop was stopped at its 1s limit (%s)", time.Since(began).Round(time.Millisecond)), nil
		}},
	}
	for _, l := range o.enabledLanguages() {
		if l.ID == lang.Python.ID {
			steps = append(steps, python...)
			continue
		}
		steps = append(steps, warmupLanguage(o, l, &rt, log))
	}

	fmt.Fprintf(stdout, "pyrun %s warmup (runtime folder %s)\n", version, o.runtimeDir)
	warned := false
	for _, st := range steps {
		began := time.Now()
		detail, err := st.run(ctx)
		var w warning
		if errors.As(err, &w) {
			fmt.Fprintf(stdout, "  %-10s WARN  %s [%s]\n", st.name, w, time.Since(began).Round(time.Millisecond))
			warned = true
			continue
		}
		if err != nil {
			fmt.Fprintf(stdout, "  %-10s FAIL  %v\n", st.name, err)
			return fmt.Errorf("warmup failed at %s: %w", st.name, err)
		}
		fmt.Fprintf(stdout, "  %-10s ok    %s [%s]\n", st.name, detail, time.Since(began).Round(time.Millisecond))
	}
	if warned {
		fmt.Fprintln(stdout, "ready, with the warnings above: pyrun serve and pyrun stdio will start warm")
		return nil
	}
	fmt.Fprintln(stdout, "ready: pyrun serve and pyrun stdio will start warm")
	return nil
}

// warning is what a warmup step found that does not stop pyrun from
// serving, but limits it: the step says WARN and warmup goes on.
type warning string

func (w warning) Error() string { return string(w) }

// reachDetail adds to the packages step's detail whether the sources that
// calls download from answer. One that does not is a warning, not a
// failure: offline, calls still load what is cached, the wheelhouse and a
// directory index.
func reachDetail(ctx context.Context, pkgs *packages.Resolver, network supervisor.Network, detail string) (string, error) {
	if network == supervisor.NetworkNone {
		return detail + "; the network mode is none: nothing is downloaded, packages come from the cache, a --package-index directory and the --wheelhouse", nil
	}
	var answered, failed []string
	for _, src := range pkgs.Reach(ctx) {
		switch {
		case src.Err == nil:
			answered = append(answered, src.What)
		case src.PyPI:
			failed = append(failed, "calls that need a package only PyPI has will fail: "+src.Err.Error())
		default:
			failed = append(failed, "calls that need a package of the index not cached yet will fail: "+src.Err.Error())
		}
	}
	if len(answered) > 0 {
		detail += "; " + strings.Join(answered, " and ") + " answered"
	}
	if len(failed) == 0 {
		return detail, nil
	}
	return "", warning(detail + "; " + strings.Join(failed, "; "))
}

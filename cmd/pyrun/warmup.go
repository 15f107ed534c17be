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
	var rt *supervisor.Runtime
	var daemons []*daemon // the worker steps', closed when warmup ends
	defer func() {
		for _, d := range daemons {
			d.Close()
		}
	}()
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
	for i, l := range o.enabledLanguages() {
		// The first language's steps have the plain names.
		prefix := ""
		if i > 0 {
			prefix = l.ID + " "
		}
		steps = append(steps, languageSteps(o, l, prefix, &rt, &daemons, log)...)
	}

	width := 10 // the names' column
	for _, st := range steps {
		width = max(width, len(st.name))
	}
	fmt.Fprintf(stdout, "pyrun %s warmup (runtime folder %s)\n", version, o.runtimeDir)
	warned := false
	for _, st := range steps {
		began := time.Now()
		detail, err := st.run(ctx)
		var w warning
		if errors.As(err, &w) {
			fmt.Fprintf(stdout, "  %-*s WARN  %s [%s]\n", width, st.name, w, time.Since(began).Round(time.Millisecond))
			warned = true
			continue
		}
		if err != nil {
			fmt.Fprintf(stdout, "  %-*s FAIL  %v\n", width, st.name, err)
			return fmt.Errorf("warmup failed at %s: %w", st.name, err)
		}
		fmt.Fprintf(stdout, "  %-*s ok    %s [%s]\n", width, st.name, detail, time.Since(began).Round(time.Millisecond))
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

// languageSteps are warmup's steps for language l, their names after
// prefix: its runtime's files; what its engine's features need (the memory
// snapshot, the package sources); then a worker of it started, and its
// self-test calls (lang.SelfTest): a print and a value, a host file out of
// reach, a runaway loop stopped at its limit. A worker step adds its
// daemon to daemons.
func languageSteps(o *options, l lang.Language, prefix string, rt **supervisor.Runtime, daemons *[]*daemon, log hclog.Logger) []warmupStep {
	var pool *supervisor.Pool // the worker step's
	call := func(ctx context.Context, code string, timeout time.Duration) (supervisor.Result, error) {
		res, err := pool.Run(ctx, supervisor.Job{ID: "warmup", Code: code, Timeout: timeout, Client: "warmup"}, nil)
		if err != nil && res.Status == "" {
			return res, err
		}
		return res, nil
	}
	features := l.Engine.Features()
	test := l.SelfTest
	steps := []warmupStep{{strings.ToLower(l.Runtime), func(context.Context) (string, error) {
		var missing []string
		for _, f := range l.Engine.Files() {
			if _, err := os.Stat(filepath.Join((*rt).Dir, f)); err != nil {
				missing = append(missing, filepath.Base(f))
			}
		}
		if len(missing) > 0 {
			return "", fmt.Errorf("%s's files are missing from %s: %s; remove %s and run pyrun warmup again to reinstall",
				l.Runtime, (*rt).Dir, strings.Join(missing, ", "), (*rt).Dir)
		}
		return versionList(l.Engine.Versions(*rt)), nil
	}}}
	if features.Snapshots {
		steps = append(steps, warmupStep{"snapshot", func(ctx context.Context) (string, error) {
			snap, err := supervisor.EnsureSnapshot(ctx, *rt, o.poolConfig(l), log.Named("snapshot"))
			if err != nil {
				return "", fmt.Errorf("the memory snapshot workers start from could not be made (they would start, slowly, without it): %w", err)
			}
			if snap.Built {
				return fmt.Sprintf("%s (%d MiB), made now in %s", snap.Path, snap.Size>>20, snap.BuildTime.Round(100*time.Millisecond)), nil
			}
			return fmt.Sprintf("%s (%d MiB), checked", snap.Path, snap.Size>>20), nil
		}})
	}
	if features.Packages {
		steps = append(steps, warmupStep{"packages", func(ctx context.Context) (string, error) {
			cfg := o.poolConfig(l)
			pkgs, err := supervisor.NewResolver(*rt, cfg, log.Named("packages"))
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
				detail = fmt.Sprintf("cached %s in %s", strings.Join(names, ", "), (*rt).PackageDir)
			}
			return reachDetail(ctx, pkgs, cfg.Network, detail)
		}})
	}
	steps = append(steps,
		warmupStep{"worker", func(ctx context.Context) (string, error) {
			d, err := newDaemon(ctx, o, daemonParts{runtime: *rt, languages: []lang.Language{l}, workers: 1}, log)
			if err != nil {
				return "", err
			}
			*daemons = append(*daemons, d)
			pool = d.pools.Pool(l.ID)
			res, err := call(ctx, "", 0)
			switch {
			case err != nil:
				return "", fmt.Errorf("no %s worker could take a call: %w", l.Title, err)
			case res.Status != supervisor.StatusSuccess:
				return "", fmt.Errorf("the first call ended %s: %s", res.Status, res.Error)
			}
			if !features.Snapshots {
				return fmt.Sprintf("%s ready after %s", res.Worker, res.QueueWait.Round(time.Millisecond)), nil
			}
			if pool.Stats().Counts.Starts["snapshot"] == 0 {
				return "", errors.New("the worker started without the memory snapshot; the log above says why")
			}
			return fmt.Sprintf("%s ready after %s, from the snapshot", res.Worker, res.QueueWait.Round(time.Millisecond)), nil
		}},
		warmupStep{"self-test", func(ctx context.Context) (string, error) {
			res, err := call(ctx, test.Hello, 0)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusSuccess:
				return "", fmt.Errorf("a test call ended %s: %s", res.Status, res.Error)
			case res.Stdout != test.HelloStdout || res.Value != test.HelloValue:
				return "", fmt.Errorf("a test call printed %q and returned %s, want %q and %s", res.Stdout, res.Value, test.HelloStdout, test.HelloValue)
			}
			return fmt.Sprintf("print and return value (%s)", res.Duration.Round(time.Millisecond)), nil
		}},
		warmupStep{"sandbox", func(ctx context.Context) (string, error) {
			res, err := call(ctx, test.ReadsHost, 0)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusSuccess:
				return "", fmt.Errorf("the sandbox test ended %s: %s", res.Status, res.Error)
			case res.Value != "false":
				return "", fmt.Errorf("%s could read /etc/passwd through Deno: the worker's permissions are too wide", l.Title)
			}
			return "host files are out of reach", nil
		}},
		warmupStep{"interrupt", func(ctx context.Context) (string, error) {
			began := time.Now()
			res, err := call(ctx, test.Loop, time.Second)
			switch {
			case err != nil:
				return "", err
			case res.Status != supervisor.StatusTimeout:
				return "", fmt.Errorf("a runaway loop with a 1s limit ended %s, want timeout: %s", res.Status, res.Error)
			}
			return fmt.Sprintf("a runaway loop was stopped at its 1s limit (%s)", time.Since(began).Round(time.Millisecond)), nil
		}},
	)
	for i := range steps {
		steps[i].name = prefix + steps[i].name
	}
	return steps
}

// Command pyrun is an MCP server that runs Python safely: a warm pool of
// Deno worker processes, each hosting Pyodide, behind the run_python_code
// tool. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// version is pyrun's version; release builds set it with -ldflags.
var version = "0.1.0-dev"

// exit statuses of pyrun itself, besides a call's own (pyrun run).
const (
	exitOK    = 0
	exitUsage = 2
	exitFail  = 3
)

func main() {
	stopProfile := startCPUProfile(os.Stderr)
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stopProfile()
	os.Exit(code)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" && commandHelp[args[1]].usage != "" {
		printCommandUsage(stdout, args[1])
		return exitOK
	}
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout)
		return exitOK
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "stdio", "serve", "warmup", "run", "version":
	default:
		fmt.Fprintf(stderr, "pyrun: unknown command %q%s\n\n", cmd, nearestCommand(cmd))
		printUsage(stderr)
		return exitUsage
	}
	opts, pos, err := loadOptions(cmd, rest)
	if errors.Is(err, flag.ErrHelp) {
		printCommandUsage(stdout, cmd)
		return exitOK
	}
	if err == nil && cmd != "run" && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "pyrun %s: %v\n", cmd, err)
		return exitUsage
	}
	log := newLogger(opts, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "stdio":
		err = cmdStdio(ctx, opts, stdin, stdout, stderr, log)
	case "serve":
		err = cmdServe(ctx, opts, rest, stderr, log)
	case "warmup":
		err = cmdWarmup(ctx, opts, stdout, stderr, log)
	case "run":
		var code int
		code, err = cmdRun(ctx, opts, pos, stdin, stdout, stderr, log)
		if err == nil {
			return code
		}
	case "version":
		err = cmdVersion(ctx, opts, stdout, stderr, log)
	}
	if err != nil {
		log.Error(err.Error())
		return exitFail
	}
	return exitOK
}

func newLogger(o *options, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "pyrun",
		Level:      hclogLevel(o.logLevel),
		Output:     w,
		JSONFormat: o.logFormat == "json",
		Color:      hclog.ColorOff,
	})
}

func hclogLevel(s string) hclog.Level {
	switch strings.ToLower(s) {
	case "trace":
		return hclog.Trace
	case "debug":
		return hclog.Debug
	case "info":
		return hclog.Info
	case "warn", "warning":
		return hclog.Warn
	case "error":
		return hclog.Error
	}
	return hclog.NoLevel
}

// closePool lets running calls finish, within a bound, and stops the workers.
func closePool(pool *supervisor.Pool, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), pool.Config().Timeout+5*time.Second)
	defer cancel()
	if err := pool.Close(ctx); err != nil {
		log.Warn("stopping workers", "error", err)
	}
}

func cmdStdio(ctx context.Context, o *options, stdin io.Reader, stdout, stderr io.Writer, log hclog.Logger) error {
	// A service on the socket first, before anything that costs (local.go).
	if c, err := attachConn(o, log); err != nil {
		return err
	} else if c != nil {
		return bridge(ctx, c, o.stdioSocket(), stdin, stdout, log)
	}
	d, err := newDaemon(ctx, o, daemonParts{languages: o.enabledLanguages(), progress: stderr, hub: true, front: true}, log)
	if err != nil {
		return err
	}
	defer d.Close()
	srv, pools, rt := d.srv, d.pools, d.rt
	log.Info("serving MCP on stdio", "workers", pools.Stats().Workers, "languages", pools.Languages(), "python", rt.Python)
	if err := srv.RunStdio(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("stdio: %w", err)
	}
	return nil
}

// cmdRun runs one snippet of --language and prints what the tool would
// return. Its exit status is the call's: 0 success, 1 an error of the
// code, 124 timeout, 137 killed.
func cmdRun(ctx context.Context, o *options, pos []string, stdin io.Reader, stdout, stderr io.Writer, log hclog.Logger) (int, error) {
	if len(pos) > 1 {
		return exitUsage, fmt.Errorf("run takes one file (or - for stdin), not %d", len(pos))
	}
	l, err := lang.Named(o.runLanguage)
	if err != nil {
		return exitUsage, fmt.Errorf("language: %w", err)
	}
	var code []byte
	if len(pos) == 0 || pos[0] == "-" {
		code, err = io.ReadAll(io.LimitReader(stdin, int64(o.mcp.MaxCode)+1))
	} else {
		code, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return exitFail, fmt.Errorf("read code: %w", err)
	}
	if len(code) > o.mcp.MaxCode {
		return exitUsage, fmt.Errorf("the code is larger than max-code (%s)", byteSize(o.mcp.MaxCode))
	}
	// One call needs one worker; code mode only for an engine whose code
	// calls tools.
	d, err := newDaemon(ctx, o, daemonParts{languages: []lang.Language{l}, workers: 1, progress: stderr,
		hub: len(o.mcpServers.servers) > 0 && l.Engine.Features().Tools}, log)
	if err != nil {
		return exitFail, err
	}
	defer d.Close()
	pools := d.pools
	job := supervisor.Job{ID: "1", Code: string(code), Client: "cli", Language: l.ID}
	if d.hub != nil {
		if caller, catalog := d.hub.ForRun(ctx, job.ID); caller != nil {
			job.Tools, job.Catalog = caller, catalog
		}
	}
	res, err := pools.Run(ctx, job, nil)
	if err != nil && res.Status == "" {
		return exitFail, err
	}
	fmt.Fprintln(stdout, mcp.FormatXML(res))
	if err := saveRich(res, o.out, stderr); err != nil {
		return exitFail, err
	}
	return res.Status.ExitCode(), nil
}

func cmdVersion(ctx context.Context, o *options, stdout, stderr io.Writer, log hclog.Logger) error {
	rt, err := supervisor.Provision(ctx, o.runtimeDir, stderr, log)
	if err != nil {
		return err
	}
	deno, err := rt.DenoVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pyrun %s\ndeno %s\npyodide %s\npython %s\n", version, deno, rt.Pyodide, rt.Python)
	printEngines(stdout, rt)
	return nil
}

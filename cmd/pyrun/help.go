package main

// Which flags are for which command: `pyrun CMD --help` lists a command's
// flags by group, the most used first, and a mistyped flag is matched
// against the command's own first. docs/configuration.md's tables are made
// from the same groups (configdoc_test.go).

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// commandFlags are the flags of cmd's groups, in the groups' order, but
// those whose help names other commands only (`serve: ...`, `run: ...`).
func commandFlags(cmd string) []string {
	var o options
	fs := o.flagSet(cmd)
	var names []string
	for _, g := range configGroups {
		if !slices.Contains(g.commands, cmd) {
			continue
		}
		for _, name := range g.flags() {
			if f := fs.Lookup(name); f != nil && helpIsFor(f.Usage, cmd) {
				names = append(names, name)
			}
		}
	}
	return names
}

// helpIsFor says whether a flag's help is for cmd: it names no command
// (`serve: ...`, `serve, with access control: ...`, `...; stdio: ...`),
// or names cmd among those it does.
func helpIsFor(help, cmd string) bool {
	named := false
	for _, c := range []string{"stdio", "serve", "run", "warmup"} {
		if strings.HasPrefix(help, c+":") || strings.HasPrefix(help, c+", ") || strings.Contains(help, "; "+c+":") {
			if c == cmd {
				return true
			}
			named = true
		}
	}
	return !named
}

// commandHelp is what `pyrun CMD --help` says first: how to call it, and
// its most used flags, which it lists before the groups.
var commandHelp = map[string]struct {
	usage string
	top   []string
}{
	"stdio":   {"pyrun stdio [flags]: MCP server on stdin/stdout (or a bridge to the local service, --attach)", []string{"timeout", "workers", "languages", "deps", "network", "mount", "attach", "config"}},
	"serve":   {"pyrun serve [flags]: MCP server over HTTP (/mcp, /sse, /healthz, /metrics) and the local socket", []string{"listen", "socket", "auth-token-file", "public-url", "workers", "timeout", "languages", "config"}},
	"run":     {"pyrun run [flags] [FILE|-] [flags]: run one snippet and print the tool's result", []string{"language", "timeout", "out", "deps", "network", "mount", "memory-limit"}},
	"warmup":  {"pyrun warmup [flags]: install and check everything a worker needs", []string{"languages", "deps", "package-index", "wheelhouse", "runtime-dir"}},
	"version": {"pyrun version: versions of pyrun, Deno, Pyodide and Python, and of each language's engine", []string{"runtime-dir"}},
}

// topFlags are the flags `pyrun --help` shows, before a command is named.
var topFlags = []string{"timeout", "workers", "languages", "deps", "network", "config", "log-level"}

const usage = `pyrun runs Python for AI agents over the Model Context Protocol.

Usage:
  pyrun stdio [flags]          MCP server on stdin/stdout
  pyrun serve [flags]          MCP server over HTTP: /mcp, /sse, /healthz, /metrics
  pyrun warmup [flags]         install and check everything a worker needs
  pyrun run [flags] [FILE|-]   run one snippet (--language, default python) and print the tool's result
  pyrun version                versions of pyrun, Deno, Pyodide and Python, and of each language's engine

Flags are also keys of the --config file, in snake_case. The most used:
`

// printUsage is `pyrun --help`: the commands and the most used flags.
func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	var o options
	fs := o.flagSet("pyrun")
	for _, name := range topFlags {
		printFlag(w, fs.Lookup(name))
	}
	fmt.Fprintln(w, "\npyrun COMMAND --help lists all of a command's flags, by group; docs/configuration.md has every one.")
}

// printCommandUsage is `pyrun CMD --help`: its most used flags, then the
// rest of its flags by group.
func printCommandUsage(w io.Writer, cmd string) {
	h := commandHelp[cmd]
	var o options
	fs := o.flagSet(cmd)
	fmt.Fprintf(w, "Usage: %s\n\nMost used:\n", h.usage)
	for _, name := range h.top {
		printFlag(w, fs.Lookup(name))
	}
	own := commandFlags(cmd)
	for _, g := range configGroups {
		var rest []string
		for _, name := range g.flags() {
			if slices.Contains(own, name) && !slices.Contains(h.top, name) {
				rest = append(rest, name)
			}
		}
		if len(rest) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range rest {
			printFlag(w, fs.Lookup(name))
		}
	}
	fmt.Fprintln(w, "\nFlags may also be keys of the --config file, in snake_case; docs/configuration.md has every one.")
}

// printFlag writes one flag as the flag package does, with two dashes.
func printFlag(w io.Writer, f *flag.Flag) {
	if f == nil {
		return
	}
	arg, help := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if arg := argName(f, arg); arg != "" {
		line += " " + arg
	}
	if def := f.DefValue; def != "" && def != "0" && def != "0s" && def != "false" {
		help += fmt.Sprintf(" (default %s)", tidyDefault(def))
	}
	fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(help, "\n", "\n    \t"))
}

// argName is the name of a flag's argument, in the help and in
// docs/configuration.md's tables: the one its help gives in backquotes,
// else one for its type.
func argName(f *flag.Flag, name string) string {
	if _, ok := f.Value.(interface{ Bytes() int64 }); ok {
		return "BYTES"
	}
	switch f.Value.(type) {
	case *stringList:
		return "a,b"
	case *durationFlag:
		return "DURATION"
	case noneCountVar:
		return "N"
	}
	switch name {
	case "int":
		return "N"
	case "float":
		return "SHARE"
	case "duration":
		return "DURATION"
	case "string", "value":
		return "VALUE"
	}
	return strings.ToUpper(name)
}

// tidyDefault writes a default as a config file may: Go writes an hour
// 1h0m0s, this 1h.
func tidyDefault(def string) string {
	d, err := time.ParseDuration(def)
	if err != nil {
		return def
	}
	def = d.String()
	if strings.HasSuffix(def, "m0s") {
		def = strings.TrimSuffix(def, "0s")
	}
	if strings.HasSuffix(def, "h0m") {
		def = strings.TrimSuffix(def, "0m")
	}
	return def
}

package main

// Which flags are for which command: `pyrun CMD --help` lists a command's
// flags by group, the most used first, and a mistyped flag is matched
// against the command's own first. docs/configuration.md's tables are made
// from the same groups (configdoc_test.go).

import (
	"slices"
)

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
	flags      []string
}

// configGroups places every flag in one group. A flag in none fails
// TestConfigurationPage: add it where a reader would look for it.
var configGroups = []configGroup{
	{"Pool and calls", "[The tool](tool.md), [limits](security.md#limits-no-call-starves-the-others-or-takes-pyrun-down)", forCalls, []string{
		"workers", "timeout", "memory-limit", "max-output", "max-code", "max-input-files", "max-queue",
		"queue-timeout", "isolation", "client-max-workers", "client-worker-idle", "live-buffer", "progress-interval",
	}},
	{"Packages", "[Packages](packages.md)", forSetup, []string{"deps", "package-index", "wheelhouse", "pypi"}},
	{"The sandbox and what a worker may hold", "[Security model](security.md)", forSetup, []string{
		"network", "os-sandbox", "worker-open-files", "worker-file-size", "max-worker-threads", "idle-cpu",
		"idle-memory-slack", "warm-calls", "worker-log-per-call", "worker-log-rate", "runtime-dir",
	}},
	{"Sessions", "[Sessions](sessions.md)", forServices, []string{
		"session-idle", "session-max-age", "max-sessions", "client-max-sessions", "session-spares", "session-worker",
		"sessions-per-worker", "max-session-workers", "instance-id",
		"session-store", "checkpoint-delay", "max-checkpoint", "session-lease", "session-move-wait",
	}},
	{"Rich results and files", "[Rich results](rich-results.md)", forCalls, []string{
		"max-displays", "max-display-bytes", "output-ttl", "output-store", "output-store-files", "output-dir",
		"mount", "out",
	}},
	{"Languages", "[Languages](languages.md)", forSetup, []string{
		"languages", "r-workers", "js-workers", "r-memory-limit", "js-memory-limit", "language",
	}},
	{"Code mode", "[Code mode](code-mode.md)", forCalls, []string{
		"mcp-servers", "max-tool-calls", "tool-concurrency", "max-tool-listing", "max-tool-message",
	}},
	{"The HTTP service", "[Serving over HTTP](operations.md#serving-over-http)", []string{"serve"}, []string{
		"listen", "stateless", "session-timeout", "keep-alive", "drain-timeout",
	}},
	{"Access control", "[Access control](operations.md#access-control-sharing-pyrun)", []string{"serve"}, []string{
		"auth-token-file", "auth-issuer", "auth-audience", "auth-jwks-url", "public-url", "metrics-auth",
		"insecure-no-auth", "client-max-calls", "client-max-queue", "metrics-max-clients",
	}},
	{"What one client can hold", "[What one client can hold](security.md#what-one-client-can-hold)", forServices, []string{
		"write-timeout", "session-pending-results", "session-pending-bytes", "client-pending-bytes",
		"max-request-bytes", "client-max-request-bytes", "go-memory-limit", "max-mcp-sessions",
		"client-max-mcp-sessions", "header-timeout", "body-timeout", "max-conns", "max-conns-per-addr",
	}},
	{"The local service", "[One service behind every stdio client](operations.md#one-service-behind-every-stdio-client)", forServices, []string{
		"socket", "attach", "max-socket-conns",
	}},
	{"MCP tasks", "[MCP tasks](mcp.md#mcp-tasks)", forServices, []string{"task-ttl", "client-max-tasks", "task-after"}},
	{"Logs and the config file", "[The config file](#the-config-file)", forAll, []string{"config", "log-level", "log-format"}},
}

// commandFlags are the flags of cmd's groups, in the groups' order.
func commandFlags(cmd string) []string {
	var names []string
	for _, g := range configGroups {
		if slices.Contains(g.commands, cmd) {
			names = append(names, g.flags...)
		}
	}
	return names
}

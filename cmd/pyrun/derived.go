package main

import (
	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// What the daemon gives each part beyond its own settings, which flags
// bind straight into its configuration (options): a setting that belongs
// to one part and that another part follows, and what pyrun works out at
// start. This is the one place where one part's settings reach another's.

// poolConfig is language l's pool configuration: the pools' settings, l's
// size and memory limit (--workers, --r-workers, ...), the files a call
// may return (the output store's bounds: no call returns more than it can
// hold), the folder files are spooled to (this run's outputs folder), and
// whether checkpoints are taken (a session store).
func (o *options) poolConfig(l lang.Language) supervisor.Config {
	cfg := o.supervisor
	cfg.Workers, cfg.MemoryLimit = o.pool(l).workers, int64(o.pool(l).memoryLimit)
	cfg.MaxFiles, cfg.MaxFileBytes = o.mcp.Outputs.MaxFiles, int(o.mcp.Outputs.MaxBytes)
	cfg.SpoolDir = o.outputs
	cfg.Checkpoints = o.store.Enabled()
	return cfg
}

// frontOptions are the MCP front end's options: its settings, and what its
// tools describe and check of the pools' (time limit, output cap,
// network, displays, mounts), the runtime's versions, the languages and
// the sessions.
func (o *options) frontOptions(rt *supervisor.Runtime) mcp.Options {
	m := o.mcp
	cfg := o.supervisor
	m.Version, m.PythonVersion, m.PyodideVersion = version, rt.Python, rt.Pyodide
	m.Timeout, m.MaxOutput, m.Network = cfg.Timeout, cfg.MaxOutput, cfg.Network
	m.MaxDisplays, m.MaxDisplayBytes = cfg.MaxDisplays, cfg.MaxDisplayBytes
	m.Mounts = mountPaths(cfg.Mounts)
	m.Outputs.Dir = o.outputs
	m.Languages, m.Disabled = o.mcpLanguages(rt), o.disabledLanguages()
	m.Sessions = mcp.SessionOptions{Idle: o.sessions.Limits.Idle, MaxAge: o.sessions.Limits.MaxAge, Max: o.sessions.Limits.Max,
		IdleCPU: cfg.IdleCPU, Durable: o.store.Enabled()}
	return m
}

// hubOptions are code mode's: its settings, and a tool's result capped
// as a call's output is (max-output).
func (o *options) hubOptions() codemode.Options {
	h := o.hub
	h.MaxResult = o.supervisor.MaxOutput
	return h
}

// sessionLimits are language l's sessions': their settings and, when a
// session is a worker of its own (--session-worker own), at most as many
// as there may be session workers.
func (o *options) sessionLimits(l lang.Language) sessions.Limits {
	lim := o.sessions.Limits
	if !o.sharedSessions(l) {
		lim.Max = o.sessionWorkers()
		lim.ClientMax = min(lim.ClientMax, lim.Max)
	}
	return lim
}

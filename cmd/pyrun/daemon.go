package main

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/codemode"
	"github.com/pyrun/pyrun/mcp/localsock"
	"github.com/pyrun/pyrun/mcp/netguard"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// A daemon is pyrun's parts, built in this one place for every command
// that runs code (stdio, serve, run; warmup's workers) and so for the
// tests that run those: the runtime, a pool per language, their sessions,
// code mode's MCP servers, tracing, and the MCP server over them. Reload
// applies new options to the parts that take them; Close stops them in the
// order they depend on each other.
type daemon struct {
	log      hclog.Logger
	rt       *supervisor.Runtime
	pools    *supervisor.Pools   // a pool per language
	sessions *sessions.Languages // nil without parts.sessions
	hub      *codemode.Hub       // nil without parts.hub
	srv      *mcp.Server         // nil without parts.front
	metrics  *mcp.Metrics        // nil without parts.metrics
	tracer   trace.Tracer

	closers []func() // Close runs them last first

	mu   sync.Mutex
	opts *options // in force; replaced by Reload
}

// daemonParts says which parts a command needs.
type daemonParts struct {
	languages []lang.Language
	// workers, when positive, sizes every pool (pyrun run: one call).
	workers int
	// runtime, when given, is the runtime provisioned already, the OS
	// sandbox checked (warmup's steps); nil: newDaemon does both.
	runtime *supervisor.Runtime
	// progress is where the runtime's first install reports.
	progress io.Writer
	// hub: code mode's MCP servers, connected while the pools start.
	hub bool
	// front: each language's sessions and the MCP server; outputs,
	// tracing and the Go heap's limit with them.
	front bool
	// metrics (serve): the MCP server's calls and sessions counted, and
	// the sources below with the daemon's own in one registration.
	metrics     bool
	connections func() netguard.Stats  // nil: not counted
	socket      func() localsock.Stats // nil: not counted
	// limitClients (serve, with access control): a client's calls take
	// places of their own in the pools and in its sessions.
	limitClients bool
}

// newDaemon builds the parts p names from o. On error, what it started is
// stopped.
func newDaemon(ctx context.Context, o *options, p daemonParts, log hclog.Logger) (d *daemon, err error) {
	d = &daemon{log: log, opts: o}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if p.front {
		removeOutputs, err := o.makeOutputs()
		if err != nil {
			return d, err
		}
		d.onClose(removeOutputs)
		applyMemoryLimit(o, log)
		tracer, stopTracing, err := startTracing(o, log)
		if err != nil {
			return d, err
		}
		d.tracer = tracer
		d.onClose(stopTracing) // after the rest: every span has ended by then
	}
	if p.hub {
		d.hub = startHub(o, log) // connects while the pools start
		d.onClose(d.hub.Close)
	}
	d.rt = p.runtime
	if d.rt == nil {
		if d.rt, err = provision(ctx, o, p.progress, log); err != nil {
			return d, err
		}
	}
	if d.pools, err = startPools(d.rt, o, p.languages, p.workers, log); err != nil {
		return d, err
	}
	d.onClose(func() { closePools(d.pools, log) })
	if p.hub {
		d.hub.Settle(ctx, hubSettle)
	}
	if !p.front {
		return d, nil
	}
	d.sessions = startLanguageSessions(o, d.pools, log)
	// Before the pools close: sessions end first.
	d.onClose(func() { closeLanguageSessions(d.sessions, d.pools, log) })
	var runner mcp.Runner = d.pools
	var sessionRunner mcp.SessionRunner = d.sessions
	if p.limitClients {
		// A client's calls take the same places in the pool and in its
		// sessions.
		limiter := mcp.LimitClients(d.pools, d.clientLimits, log.Named("pool"))
		runner, sessionRunner = limiter, limiter.Sessions(d.sessions)
	}
	if p.metrics {
		d.metrics = mcp.NewMetrics(version, d.pools.Stats)
		runner, sessionRunner = d.metrics.Instrument(runner), d.metrics.InstrumentSessions(sessionRunner)
	}
	d.srv = mcp.New(runner, d.mcpOptions(o), log)
	d.srv.UseTracer(d.tracer)
	d.srv.UseSessions(sessionRunner)
	if p.metrics {
		d.countAll(o, p)
	}
	return d, nil
}

// onClose adds f to what Close runs, before what was added earlier.
func (d *daemon) onClose(f func()) { d.closers = append(d.closers, f) }

// Close stops what newDaemon started, the last started first: running
// session calls and calls finish within the pools' bound, sessions end,
// workers stop, code mode's servers are let go, spans are sent. It may be
// called more than once.
func (d *daemon) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// Drain lets the calls running in sessions and in the pools finish
// within ctx, then ends the sessions and stops the workers (a service's
// shutdown, whose bound is drain-timeout). Close afterwards finds them
// closed.
func (d *daemon) Drain(ctx context.Context) (sessionsErr, poolsErr error) {
	if d.sessions != nil {
		sessionsErr = d.sessions.Close(ctx)
	}
	return sessionsErr, d.pools.Close(ctx)
}

// countAll is the one registration of what the metrics count beside the
// calls: the pools, the OS sandbox, sessions, languages, code mode,
// tasks, and the connections and socket p names.
func (d *daemon) countAll(o *options, p daemonParts) {
	m := d.metrics
	m.OSSandbox(d.sandbox())
	m.MaxClients(o.http.MaxClients)
	if p.connections != nil {
		m.CountConnections(p.connections)
	}
	if d.hub != nil {
		m.CodeMode(d.hub)
	}
	for _, name := range d.pools.Languages() {
		if l, err := lang.Named(name); err == nil && l.Engine.Features().Snapshots {
			// Checkpoints, moves and restores: the sessions of the
			// engine that takes checkpoints.
			m.CountPythonSessions(d.sessions.Manager(name).Stats)
			break
		}
	}
	m.CountLanguages(d.pools.LanguageStats, d.openSessions)
	m.CountTasks(d.srv)
	if p.socket != nil {
		m.CountSocket(p.socket)
	}
}

// sandbox is what the OS sandbox around the workers holds here (the
// machine is probed once: oswall.Probe).
func (d *daemon) sandbox() oswall.Status {
	return oswall.Describe(d.options().supervisor.OSSandbox, oswall.Probe())
}

// openSessions are the open sessions of each language.
func (d *daemon) openSessions() map[string]int {
	return openSessions(d.sessions, d.pools.Languages())
}

func (d *daemon) options() *options {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts
}

// mcpOptions are o's options of the MCP server, code mode's hub with them.
func (d *daemon) mcpOptions(o *options) mcp.Options {
	mopts := o.frontOptions(d.rt)
	if d.hub != nil {
		mopts.CodeMode = d.hub
	}
	return mopts
}

// clientLimits are the per-client limits in force.
func (d *daemon) clientLimits() mcp.ClientLimits {
	o, cfg := d.options(), d.pools.Pool(d.pools.Languages()[0]).Config()
	l := o.clients
	if l.MaxCalls == 0 {
		l.MaxCalls = d.pools.Stats().Workers // every language's
	}
	l.QueueTimeout = cfg.QueueTimeout
	return l
}

// Reload applies o to the running parts, without disturbing running
// calls: the pools (o is refused whole if one refuses it), the sessions'
// limits, the log level, the Go heap's limit, code mode's servers and the
// MCP server's options. o's settings that apply only at start must be
// those in force (keepRestartOnly).
func (d *daemon) Reload(o *options) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := reconfigurePools(d.pools, o); err != nil {
		return err
	}
	if d.sessions != nil {
		setSessionLimits(d.sessions, o)
	}
	d.log.SetLevel(hclogLevel(o.logLevel))
	applyMemoryLimit(o, d.log)
	if d.hub != nil {
		d.hub.SetOptions(o.hubOptions())
		d.hub.Configure(o.mcpServers.servers)
	}
	if d.srv != nil {
		d.srv.SetOptions(d.mcpOptions(o))
	}
	d.opts = o
	return nil
}

// bound is how long the daemon's calls may take to finish: the longest
// call limit of its pools, and some seconds to stop.
func (d *daemon) bound() time.Duration { return poolsTimeout(d.pools) + 5*time.Second }

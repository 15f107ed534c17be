// Package codemode connects pyrun to other MCP servers so that the Python
// code of a call can call their tools ("code mode"): one program calls many
// tools, combines their results and returns only the answer.
//
//	hub := codemode.New(codemode.Options{MaxCalls: 50}, version, log)
//	hub.Configure(servers) // from the mcp_servers config; again on reload
//	defer hub.Close()
//	caller, catalog := hub.ForRun(ctx, jobID) // supervisor.Job's Tools and Catalog
//
// The hub is an MCP client of each configured server (stdio servers it
// starts and supervises, Streamable HTTP ones it connects to), lists their
// tools and keeps the connections up. The worker's Python sees the catalog
// (pyodide-host/python/mcp_tools.py) and asks the supervisor for calls, which
// reach the hub's Caller: allow list, argument schema, limits and audit log
// are all enforced here, in pyrun, never in the sandbox.
package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/pyrun/pyrun/internal/bytesize"
	"go.opentelemetry.io/otel/trace"
)

// Options are the limits on the tool calls of one run. The zero value of
// each field means its default.
type Options struct {
	// MaxCalls bounds the tool calls of one run. 0: 50.
	MaxCalls int
	// Concurrency bounds the tool calls of one run in progress at once. 0: 4.
	Concurrency int
	// MaxResult caps a tool's result as the code receives it, in bytes. 0: 64 KiB.
	MaxResult int
	// MaxListing caps the list of functions in the tool description, in
	// bytes; a longer list is summarised. 0: 8 KiB.
	MaxListing int
	// Settle bounds how long a run waits for servers still connecting
	// before it starts (after pyrun's start or a reload). 0: 10s.
	Settle time.Duration
	// MaxMessage bounds one message from a server, in bytes: one past it
	// fails the call it answers, and the connection is kept. It applies to
	// connections made after it is set. 0: DefaultMaxMessage.
	MaxMessage int
}

// DefaultOptions are the limits by default, each field set.
func DefaultOptions() Options {
	return Options{MaxCalls: 50, Concurrency: 4, MaxResult: 64 << 10, MaxListing: 8 << 10, Settle: 10 * time.Second, MaxMessage: DefaultMaxMessage}
}

// Validate checks limits a user set, where a zero is a value and not the
// default, naming each setting as pyrun's flags and config keys do
// (docs/configuration.md, Code mode). MaxResult is the output's cap,
// checked with it; Settle is pyrun's own.
func (o Options) Validate() error {
	switch {
	case o.MaxCalls < 1 || o.MaxCalls > 10000:
		return fmt.Errorf("max-tool-calls must be between 1 and 10000, not %d", o.MaxCalls)
	case o.Concurrency < 1 || o.Concurrency > 64:
		return fmt.Errorf("tool-concurrency must be between 1 and 64, not %d", o.Concurrency)
	case o.MaxListing < 1<<10 || o.MaxListing > 1<<20:
		return fmt.Errorf("max-tool-listing must be between 1KiB and 1MiB, not %s", bytesize.Format(int64(o.MaxListing)))
	case o.MaxMessage < 64<<10 || o.MaxMessage > 256<<20:
		return fmt.Errorf("max-tool-message must be between 64KiB and 256MiB, not %s", bytesize.Format(int64(o.MaxMessage)))
	}
	return nil
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	o.MaxCalls = positiveOr(o.MaxCalls, d.MaxCalls)
	o.Concurrency = positiveOr(o.Concurrency, d.Concurrency)
	o.MaxResult = positiveOr(o.MaxResult, d.MaxResult)
	o.MaxListing = positiveOr(o.MaxListing, d.MaxListing)
	o.Settle = positiveOr(o.Settle, d.Settle)
	o.MaxMessage = positiveOr(o.MaxMessage, d.MaxMessage)
	return o
}

// positiveOr is v, or def when v is not positive.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Hub holds the connections to the configured servers. Its methods are
// safe for concurrent use.
type Hub struct {
	log     hclog.Logger
	version string

	mu       sync.RWMutex
	opts     Options
	servers  map[string]*upstream
	onChange []func()
	observe  func(server, status string, d time.Duration)
	catalog  json.RawMessage // cached; nil: to be built
	closed   bool
	retiring sync.WaitGroup
	// refused counts the messages refused from each server (by the name
	// in the config), by reason; it outlives reloads.
	refused map[string]map[string]int64
}

// New makes a hub with no servers.
func New(opts Options, version string, log hclog.Logger) *Hub {
	return &Hub{log: log, version: version, opts: opts.withDefaults(), servers: map[string]*upstream{},
		refused: map[string]map[string]int64{}}
}

// OnChange registers f, called (on some goroutine) whenever the catalog
// may have changed: a server connected or went away, its tools changed.
func (h *Hub) OnChange(f func()) {
	h.mu.Lock()
	h.onChange = append(h.onChange, f)
	h.mu.Unlock()
}

// Observe registers f, called after every tool call with its server,
// status and duration (for metrics). server is a configured server's name,
// or OtherServer for a call that named none: the code chooses the names it
// calls, so they must not become label values.
func (h *Hub) Observe(f func(server, status string, d time.Duration)) {
	h.mu.Lock()
	h.observe = f
	h.mu.Unlock()
}

// SetOptions applies new limits to the runs that start from now on.
func (h *Hub) SetOptions(opts Options) {
	h.mu.Lock()
	h.opts = opts.withDefaults()
	h.catalog = nil
	h.mu.Unlock()
	h.changed()
}

// Configure applies a server list: new servers are started (in the
// background: a server that cannot start never holds anything up),
// removed ones are stopped once their running calls have ended, and
// changed ones are replaced the same way. Calls running keep the
// connection they started on.
func (h *Hub) Configure(servers map[string]Server) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	var retire []*upstream
	for name, u := range h.servers {
		if cfg, ok := servers[name]; !ok || !cfg.equal(u.cfg) {
			retire = append(retire, u)
			delete(h.servers, name)
		}
	}
	for name, cfg := range servers {
		if _, ok := h.servers[name]; ok {
			continue
		}
		h.servers[name] = startUpstream(h, name, cfg)
	}
	h.catalog = nil
	h.retiring.Add(len(retire))
	h.mu.Unlock()
	for _, u := range retire {
		u.log.Info("MCP server removed or changed in the config; it stops once its running calls end")
		go func() {
			defer h.retiring.Done()
			u.close()
		}()
	}
	h.changed()
}

// Close stops every server; it returns when their processes are gone.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	servers := h.servers
	h.servers = map[string]*upstream{}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, u := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.close()
		}()
	}
	wg.Wait()
	h.retiring.Wait()
}

func (h *Hub) changed() {
	h.mu.Lock()
	h.catalog = nil
	fs := slices.Clone(h.onChange)
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// sorted returns the servers by name.
func (h *Hub) sorted() []*upstream {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*upstream, 0, len(h.servers))
	for _, u := range h.servers {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *upstream) int {
		if a.name < b.name {
			return -1
		}
		return 1
	})
	return out
}

// acquire returns the server of that name with a call counted on it, so
// that a reload stops it only after the call; u.release ends it.
func (h *Hub) acquire(name string) *upstream {
	h.mu.RLock()
	defer h.mu.RUnlock()
	u := h.servers[name]
	if u != nil {
		u.calls.Add(1)
		u.busy.Add(1)
	}
	return u
}

// Busy is the number of calls in progress on a server.
func (h *Hub) Busy(server string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if u := h.servers[server]; u != nil {
		return int(u.busy.Load())
	}
	return 0
}

func (h *Hub) options() Options {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.opts
}

// Stats is the state of each server, for metrics and health.
type Stats struct {
	Server string
	State  string // connecting, connected, down
	Tools  int    // allowed tools offered
	// Refused counts the messages from the server refused since pyrun
	// started, by reason (RefusedReasons).
	Refused map[string]int64
}

// Stats reports every server's state.
func (h *Hub) Stats() []Stats {
	var out []Stats
	for _, u := range h.sorted() {
		u.mu.Lock()
		st := Stats{Server: u.name, State: u.state.String(), Tools: len(u.tools)}
		u.mu.Unlock()
		h.mu.RLock()
		st.Refused = maps.Clone(h.refused[u.name])
		h.mu.RUnlock()
		out = append(out, st)
	}
	return out
}

func (h *Hub) countRefused(server, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused[server] == nil {
		h.refused[server] = map[string]int64{}
	}
	h.refused[server][reason]++
}

// ForRun returns the caller for one run's tool calls and the catalog its
// code sees, after waiting (bounded by Options.Settle) for servers that are
// still connecting. Both are nil when no server is configured. The span
// in ctx, if any, is the run's: its tool calls carry it to the servers
// (trace.go).
func (h *Hub) ForRun(ctx context.Context, run string) (*Caller, json.RawMessage) {
	servers := h.sorted()
	if len(servers) == 0 {
		return nil, nil
	}
	opts := h.options()
	h.Settle(ctx, opts.Settle)
	return newCaller(h, run, opts, trace.SpanFromContext(ctx)), h.Catalog()
}

// Settle waits until no server is connecting (each is connected or down),
// at most d.
func (h *Hub) Settle(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, u := range h.sorted() {
		u.waitSettled(ctx)
	}
}

package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Supervision delays: a server whose connection failed, or ended sooner
// than stableAfter after it began, is tried again after a delay that starts
// at restartMin and doubles up to restartMax.
var (
	restartMin  = 500 * time.Millisecond
	restartMax  = 30 * time.Second
	stableAfter = 10 * time.Second
	// connectTimeout bounds a connection's start: the process or HTTP
	// request, MCP's initialize and the tool list.
	connectTimeout = 30 * time.Second
	// terminateDelay is how long a stdio server is given to exit after its
	// stdin is closed, and again after SIGTERM, before SIGKILL.
	terminateDelay = 2 * time.Second
	// pingTimeout bounds the ping that tells whether a connection that
	// failed a call is still up.
	pingTimeout = 5 * time.Second
)

// upstream is one configured server: its connection, kept up by run, and
// the allowed tools it offers. Its methods are safe for concurrent use.
type upstream struct {
	name    string
	cfg     Server
	log     hclog.Logger
	version string
	changed func() // the tools or the state changed
	// maxMessage is Options.MaxMessage in force, read at each connection;
	// refused counts a message refused (reason), for metrics.
	maxMessage func() int
	refused    func(reason string)

	ctx    context.Context // ends when the upstream is closed
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	calls  sync.WaitGroup
	busy   atomic.Int32   // calls in progress
	tasks  sync.WaitGroup // tool-list refreshes

	mu      sync.Mutex
	state   state
	session *sdk.ClientSession // set while connected
	ready   chan struct{}      // closed when the state leaves connecting
	lastErr error              // why the last connection failed or ended
	tools   []*tool            // the allowed tools it offered last, by name
	listed  bool               // tools holds a list the server gave
}

type state int

const (
	connecting state = iota
	connected
	down // the last attempt failed; another follows after a delay
	closed
)

func (s state) String() string {
	return [...]string{"connecting", "connected", "down", "closed"}[s]
}

// tool is an allowed tool as the server described it, with its input
// schema resolved for checking arguments.
type tool struct {
	sdk      *sdk.Tool
	schema   json.RawMessage
	resolved *jsonschema.Resolved // nil: the schema could not be resolved; arguments are only checked to be an object
	pending  bool                 // an allowed tool of a server that has not listed its tools yet
}

func startUpstream(h *Hub, name string, cfg Server) *upstream {
	u := &upstream{
		name: name, cfg: cfg, log: h.log.Named(name), version: h.version, changed: h.changed,
		maxMessage: func() int { return h.options().MaxMessage },
		refused:    func(reason string) { h.countRefused(name, reason) },
		done:       make(chan struct{}), ready: make(chan struct{}),
	}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	go u.run()
	return u
}

// run keeps the connection up until the upstream is closed.
func (u *upstream) run() {
	defer close(u.done)
	failures := 0
	for u.ctx.Err() == nil {
		began := time.Now()
		cs, err := u.connect()
		if err != nil {
			failures++
			delay := backoff(failures)
			args := []any{"error", err, "retry_in", delay}
			if u.cfg.stdio() {
				args = append(args, "stderr", "logged at debug level only (--log-level debug)")
			}
			u.log.Warn("MCP server not available; left out until it is", args...)
			u.setState(down, nil, err)
			if !u.sleep(delay) {
				break
			}
			u.setState(connecting, nil, err)
			continue
		}
		u.log.Info("MCP server connected", "tools", len(u.toolList()), "transport", u.transport())
		err = cs.Wait()
		if u.ctx.Err() != nil {
			break
		}
		if err == nil {
			err = errors.New("the connection ended")
		}
		u.setState(connecting, nil, err)
		if time.Since(began) < stableAfter {
			failures++
		} else {
			failures = 0
		}
		delay := time.Duration(0)
		if failures > 0 {
			delay = backoff(failures)
		}
		u.log.Warn("MCP server connection lost; reconnecting", "error", err, "retry_in", delay)
		if !u.sleep(delay) {
			break
		}
	}
	u.setState(closed, nil, errors.New("the server was removed from the config"))
}

func backoff(failures int) time.Duration {
	d := restartMin
	for i := 1; i < failures && d < restartMax; i++ {
		d *= 2
	}
	return min(d, restartMax)
}

func (u *upstream) sleep(d time.Duration) bool {
	if d <= 0 {
		return u.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-u.ctx.Done():
		return false
	}
}

func (u *upstream) transport() string {
	if u.cfg.stdio() {
		return "stdio"
	}
	return "streamable-http"
}

// connect starts a connection, lists the tools and publishes both.
func (u *upstream) connect() (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(u.ctx, connectTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun", Version: u.version}, &sdk.ClientOptions{
		// No roots, sampling or elicitation: code calls tools, nothing else.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			u.refreshSoon()
		},
	})
	// What the server sends is read through a guard: a message too large
	// or broken fails its own call, not the connection every run shares.
	g := &guard{server: u.name, max: u.maxMessage(), log: u.log, counted: u.refused}
	var tr sdk.Transport
	if u.cfg.stdio() {
		cmd := exec.Command(u.cfg.Command, u.cfg.Args...)
		cmd.Env = os.Environ()
		for k, v := range u.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Dir = u.cfg.Cwd
		cmd.Stderr = &serverStderr{log: u.log}
		// A grandchild that keeps stderr open does not hold up Close.
		cmd.WaitDelay = terminateDelay
		tr = &commandTransport{cmd: cmd, terminate: terminateDelay, guard: g}
	} else {
		tr = &sdk.StreamableClientTransport{
			Endpoint:   u.cfg.URL,
			HTTPClient: &http.Client{Transport: httpGuard{guard: g, rt: headers{h: u.cfg.Headers, rt: http.DefaultTransport}}},
			MaxRetries: 2,
			// The guard keeps events within the limit; the SDK's own cap,
			// which fails the connection, stays out of its way.
			MaxEventSize: g.max + 4*sseSlack,
		}
	}
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	tools, err := u.listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return nil, err
	}
	u.mu.Lock()
	u.tools, u.listed = tools, true
	u.mu.Unlock()
	u.setState(connected, cs, nil)
	return cs, nil
}

// listTools lists the server's tools and keeps the allowed ones.
func (u *upstream) listTools(ctx context.Context, cs *sdk.ClientSession) ([]*tool, error) {
	var tools []*tool
	offered := map[string]bool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		offered[t.Name] = true
		if !u.cfg.allowed(t.Name) {
			continue
		}
		tools = append(tools, u.describe(t))
	}
	for _, name := range u.cfg.Allow {
		if !offered[name] {
			u.log.Warn("an allowed tool is not offered by the server", "tool", name)
		}
	}
	slices.SortFunc(tools, func(a, b *tool) int {
		switch {
		case a.sdk.Name < b.sdk.Name:
			return -1
		case a.sdk.Name > b.sdk.Name:
			return 1
		}
		return 0
	})
	return tools, nil
}

func (u *upstream) describe(t *sdk.Tool) *tool {
	entry := &tool{sdk: t, schema: json.RawMessage(`{"type":"object"}`)}
	b, err := json.Marshal(t.InputSchema)
	if err != nil || t.InputSchema == nil {
		return entry
	}
	entry.schema = b
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		u.log.Warn("a tool's input schema does not decode; its arguments are only checked to be an object", "tool", t.Name, "error", err)
		return entry
	}
	r, err := s.Resolve(nil)
	if err != nil {
		u.log.Warn("a tool's input schema does not resolve; its arguments are only checked to be an object", "tool", t.Name, "error", err)
		return entry
	}
	entry.resolved = r
	return entry
}

// refreshSoon lists the tools again, after notifications/tools/list_changed.
func (u *upstream) refreshSoon() {
	u.tasks.Add(1)
	go func() {
		defer u.tasks.Done()
		u.mu.Lock()
		cs := u.session
		u.mu.Unlock()
		if cs == nil {
			return
		}
		ctx, cancel := context.WithTimeout(u.ctx, connectTimeout)
		defer cancel()
		tools, err := u.listTools(ctx, cs)
		if err != nil {
			u.log.Warn("tool list changed, but listing it failed", "error", err)
			return
		}
		u.mu.Lock()
		u.tools = tools
		u.mu.Unlock()
		u.log.Info("MCP server's tools changed", "tools", len(tools))
		u.changed()
	}()
}

func (u *upstream) setState(s state, cs *sdk.ClientSession, err error) {
	u.mu.Lock()
	old := u.state
	u.state, u.session = s, cs
	if err != nil {
		u.lastErr = err
	}
	if s == connecting && old != connecting {
		u.ready = make(chan struct{})
	}
	if s != connecting && old == connecting {
		close(u.ready)
	}
	u.mu.Unlock()
	if old != s {
		u.changed()
	}
}

// toolList is the allowed tools offered last. Until the server has
// listed its tools, it is the allow list, each tool marked pending (no
// schema yet): code can call them, and the calls wait for the server.
func (u *upstream) toolList() []*tool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.listed {
		return u.tools
	}
	var out []*tool
	for _, name := range u.cfg.Allow {
		out = append(out, &tool{sdk: &sdk.Tool{Name: name}, pending: true})
	}
	return out
}

func (u *upstream) lookup(name string) *tool {
	for _, t := range u.toolList() {
		if t.sdk.Name == name {
			return t
		}
	}
	return nil
}

// status says how the server is, for the catalog and the description: ""
// when connected.
func (u *upstream) status() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.state == connected:
		return ""
	case u.state == connecting && u.lastErr == nil:
		return "connecting"
	case u.state == connecting:
		// A retry after a failure: the code should not count on it, as on a
		// server that is down (a catalog taken during the retry said
		// "connecting" of a server that had never started).
		return fmt.Sprintf("not available (%v); trying again", u.lastErr)
	}
	return fmt.Sprintf("not available (%v)", u.lastErr)
}

// waitSession returns the connection, waiting while one is being made.
func (u *upstream) waitSession(ctx context.Context) (*sdk.ClientSession, error) {
	for {
		u.mu.Lock()
		st, cs, ready, last := u.state, u.session, u.ready, u.lastErr
		u.mu.Unlock()
		switch st {
		case connected:
			return cs, nil
		case down:
			return nil, fmt.Errorf("%w: %v", errUnavailable, last)
		case closed:
			return nil, fmt.Errorf("%w: it was removed from pyrun's config", errUnavailable)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: still connecting", errUnavailable)
		}
	}
}

// waitSettled waits until the upstream is not connecting, or ctx ends.
func (u *upstream) waitSettled(ctx context.Context) {
	u.mu.Lock()
	st, ready := u.state, u.ready
	u.mu.Unlock()
	if st != connecting {
		return
	}
	select {
	case <-ready:
	case <-ctx.Done():
	}
}

// broken is told of a call that failed with err, which is no answer of the
// server's, and reports whether the connection failed. If it did (a crash,
// say), it is closed so that run makes a new one, and calls from now on
// wait for that rather than try the broken one. A failure of the call's own
// (a result that does not decode) leaves the connection to the other calls
// on it: a ping tells the two apart, and only one that fails for want of a
// connection closes it (a server too busy to answer is not taken for dead).
func (u *upstream) broken(cs *sdk.ClientSession, err error) bool {
	if !u.current(cs) {
		return true // run has seen it end already
	}
	ctx, cancel := context.WithTimeout(u.ctx, pingTimeout)
	defer cancel()
	perr := cs.Ping(ctx, nil)
	var wire *jsonrpc.Error
	if perr == nil || ctx.Err() != nil || errors.As(perr, &wire) {
		u.log.Debug("a tool call failed, but the connection answers; it is kept", "error", err)
		return false
	}
	if u.current(cs) {
		u.log.Warn("a tool call failed and the connection does not answer; reconnecting", "error", err, "ping", perr)
		u.setState(connecting, nil, err)
		_ = cs.Close()
	}
	return true
}

// current says whether cs is the connection in use.
func (u *upstream) current(cs *sdk.ClientSession) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.session == cs && u.state == connected
}

// release ends a call counted by Hub.acquire.
func (u *upstream) release() {
	u.busy.Add(-1)
	u.calls.Done()
}

// close stops the upstream once the calls it is running have ended; it
// returns when its connection and process are gone.
func (u *upstream) close() {
	u.calls.Wait()
	u.cancel()
	u.mu.Lock()
	cs := u.session
	u.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	<-u.done
	u.tasks.Wait()
}

var errUnavailable = errors.New("the MCP server is not available")

// headers adds the configured headers to every request.
type headers struct {
	h  map[string]string
	rt http.RoundTripper
}

func (h headers) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(h.h) > 0 {
		req = req.Clone(req.Context())
		for k, v := range h.h {
			req.Header.Set(k, v)
		}
	}
	return h.rt.RoundTrip(req)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/httpfront"
	"github.com/pyrun/pyrun/mcp/localsock"
	"github.com/pyrun/pyrun/mcp/netguard"
	"github.com/pyrun/pyrun/supervisor"
)

// errForced is the error of a shutdown cut short by a second signal.
var errForced = errors.New("stopped by a second signal: running calls were killed")

// service is a running `pyrun serve`: the pool, the MCP front end, the HTTP
// server and the config watcher, and the options in force.
type service struct {
	args    []string // the command line, for reloads
	log     hclog.Logger
	d       *daemon // the pools, sessions, hub and MCP server
	handler *httpfront.Handler
	http    *http.Server
	watcher *configWatcher // nil without a config file
	socket  socketService  // the local socket's sessions (local.go); zero without --socket

	reloading sync.Mutex // one reload at a time: SIGHUP and the watcher
}

// cmdServe runs the HTTP service until SIGTERM or SIGINT, then shuts down
// gracefully: no new sessions or calls, running calls finish (bounded by
// drain-timeout), sessions and their streams close, workers stop. A second
// signal stops at once. SIGHUP reloads the config file, as its changes do.
func cmdServe(ctx context.Context, o *options, args []string, stderr io.Writer, log hclog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if err := checkListen(o, log); err != nil {
		return err
	}
	ln, sock, err := socketListeners(o, log) // local.go
	if err != nil {
		return err
	}
	defer ln.Close()
	var socketConns *localsock.Listener
	if sock != nil {
		socketConns = localsock.Guard(sock, o.socketConns, log.Named("socket"))
		defer sock.Close()
	}
	limits := o.conns
	if limits.Total == 0 {
		// Room for each worker's pipes and files, and pyrun's own: a pool
		// has up to twice its size in workers, never-used and owned by
		// clients (docs/architecture.md, Workers belong to a client).
		workers := 0
		for _, l := range o.enabledLanguages() {
			workers += o.pool(l).workers
		}
		limits.Total = netguard.TotalFor(64 + 32*2*workers)
	}
	conns := netguard.Listen(ln, limits)
	guard, err := newGuard(o, ln.Addr().String(), log.Named("access"))
	if err != nil {
		return err
	}

	parts := daemonParts{languages: o.enabledLanguages(), progress: stderr, hub: true, front: true,
		metrics: true, connections: conns.Stats, limitClients: guard != nil}
	if socketConns != nil {
		parts.socket = socketConns.Stats
	}
	d, err := newDaemon(ctx, o, parts, log)
	if err != nil {
		return err
	}
	defer d.Close() // after shutdown's drain, or on the way out of an error
	s := &service{args: args, log: log, d: d}
	pools := d.pools
	sandbox := d.sandbox()
	// The front end's settings, and what it shows of the daemon's parts.
	front := o.http
	front.Stats, front.LanguageStats, front.LanguageSessions = pools.Stats, pools.LanguageStats, d.openSessions
	front.SessionsOpen = func() int { return d.sessions.Stats().Open }
	front.OSSandbox = &sandbox
	httpOpts := mcp.HTTPOptions{Metrics: d.metrics, Options: front}
	if guard != nil {
		httpOpts.Protect = guard.Protect // and /metrics, with --metrics-auth (o.http)
	}
	s.handler = d.srv.HTTPHandler(httpOpts)
	s.http = &http.Server{
		Handler:           netguard.Bodies(withMetadata(guard, s.handler), o.conns.BodyTimeout),
		ReadHeaderTimeout: o.conns.HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: event streams and long calls stay open.
		ErrorLog: log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	served := make(chan error, 1)
	go func() { served <- s.http.Serve(conns) }()
	if socketConns != nil {
		s.startSocket(socketConns)
		defer s.stopSocket()
	}

	if o.configFile != "" {
		s.watcher, err = watchConfig(o.configFile, log.Named("config"), s.reload)
		if err != nil {
			log.Error("config file changes will not be applied (SIGHUP still reloads)", "error", err)
		} else {
			defer s.watcher.Close()
		}
	}
	if file := guard.TokenFile(); file != "" {
		tw, err := watchConfig(file, log.Named("access"), func() { _ = guard.ReloadTokens() })
		if err != nil {
			log.Error("token file changes will not be applied (SIGHUP still reloads)", "error", err)
		} else {
			defer tw.Close()
		}
	}
	addr := ln.Addr().String()
	mcpURL, sseURL := "http://"+addr+"/mcp", "http://"+addr+"/sse"
	if addr == listenNone {
		mcpURL, sseURL = "", ""
	}
	log.Info("listening", "addr", addr, "mcp", mcpURL, "sse", sseURL,
		"stateless", o.http.Stateless, "workers", pools.Stats().Workers, "languages", pools.Languages(), "python", d.rt.Python, "auth", o.authMode(),
		"socket", socketName(sock))

	for {
		select {
		case err := <-served:
			// The listener failed; nothing more can come in.
			d.Close()
			return fmt.Errorf("serve: %w", err)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				_ = guard.ReloadTokens()
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			return s.shutdown(sigs, served)
		}
	}
}

// shutdown stops the service in order. Answers to running calls reach
// their clients before their sessions close.
func (s *service) shutdown(sigs <-chan os.Signal, served <-chan error) error {
	o := s.d.options()
	drain := o.drainTimeout
	if drain == 0 {
		drain = s.d.bound()
	}
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), drain)
	defer cancelDrain()

	// A second signal cuts the drain short.
	var forced bool
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					continue
				}
				s.log.Warn("second signal: stopping now; running calls are killed", "signal", sig.String())
				forced = true
				cancelDrain()
				_ = s.http.Close()
				return
			case <-stopWatch:
				return
			}
		}
	}()

	if s.watcher != nil {
		_ = s.watcher.Close() // no reloads while stopping
	}
	// Stop accepting: no new connections, sessions or streams; calls in
	// existing sessions are refused by the closing pool.
	s.handler.Drain()
	s.socket.drain()
	shut := make(chan error, 1)
	go func() { shut <- s.http.Shutdown(context.Background()) }()

	st := s.d.pools.Stats()
	s.log.Info("waiting for running calls", "busy", st.Busy, "queued", st.Queued, "drain_timeout", drain)
	// Calls already waiting for a worker were accepted: they run too, for
	// a load balancer's client would see a refusal after the fact. So do
	// those of requests taken in before the drain that have not reached a
	// queue yet.
	if err := s.handler.WaitAccepted(drainCtx); err != nil {
		s.log.Warn("drain time is over: requests were still running", "error", err)
	}
	waitForLine(drainCtx, s.d.pools)
	// Calls in sessions finish, then the sessions end, before the pools
	// close.
	sessionsErr, poolsErr := s.d.Drain(drainCtx)
	if sessionsErr != nil {
		s.log.Warn("drain time is over: running session calls were stopped", "error", sessionsErr)
	}
	if poolsErr != nil {
		s.log.Warn("drain time is over: running calls were stopped", "error", poolsErr)
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	if err := s.handler.CloseSessions(closeCtx); err != nil {
		s.log.Warn("closing sessions", "error", err)
	}
	s.stopSocket()
	select {
	case <-shut:
	case <-closeCtx.Done():
		_ = s.http.Close()
		<-shut
	}
	<-served // Serve has returned: it returns as soon as Shutdown starts
	close(stopWatch)
	<-watchDone
	s.d.Close() // code mode's servers, spans, the outputs' folder
	if forced {
		return errForced
	}
	s.log.Info("stopped")
	return nil
}

// waitForLine returns once no call waits for a worker, or when ctx ends.
// The pool has no event for that; shutdown polls, briefly.
func waitForLine(ctx context.Context, pool *supervisor.Pools) {
	for pool.Stats().Queued > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reload re-reads the command line and the config file (a flag still wins
// over the file) and applies what changed, without disturbing running
// calls. A file that does not parse or check is rejected whole.
func (s *service) reload() {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	old := s.d.options()
	o, _, err := loadOptions("serve", s.args)
	if err != nil {
		s.log.Error("config rejected; the settings in force stay", "file", old.configFile, "error", err)
		return
	}
	o.outputs = old.outputs // made at start
	before, after := old.settings(), o.settings()
	var changed, ignored []string
	for name, v := range after {
		if before[name] == v {
			continue
		}
		if slices.Contains(restartOnly, name) {
			ignored = append(ignored, name)
			continue
		}
		changed = append(changed, name)
	}
	slices.Sort(changed)
	slices.Sort(ignored)
	if len(ignored) > 0 {
		s.log.Warn("these settings apply only when pyrun starts; restart it to change them", "keys", ignored)
		o.keepRestartOnly(old)
	}
	if len(changed) == 0 {
		s.log.Info("config reloaded: nothing changed", "file", o.configFile)
		return
	}
	if err := s.d.Reload(o); err != nil {
		s.log.Error("config rejected; the settings in force stay", "file", o.configFile, "error", err)
		return
	}
	s.log.Info("config reloaded", "file", o.configFile, "changed", changed)
}

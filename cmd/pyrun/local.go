package main

// One local service behind every stdio client (docs/contract.md section 16):
// `pyrun serve --socket PATH` also serves MCP on a Unix socket, and
// `pyrun stdio` bridges its stdin/stdout to that socket when a service
// answers there, instead of starting a pool of its own.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/localsock"
)

// localFlags declares the local socket's flags on fs.
func (o *options) localFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.socket, "socket", "", "serve: also serve MCP on this Unix socket `path` (owner-only; peers of other users are refused); stdio: the service's socket to attach to (default $XDG_RUNTIME_DIR/pyrun.sock, else /run/user/UID/pyrun.sock); default: that path, for serve too")
	fs.StringVar(&o.attach, "attach", "auto", "stdio: auto (bridge to the service on --socket when it answers, else serve with a pool of its own), never, or required (fail when no service answers)")
	o.socketConns = localsock.Limits{MaxConns: 256}
	fs.IntVar(&o.socketConns.MaxConns, "max-socket-conns", o.socketConns.MaxConns, "serve: connections open at once on --socket, each an MCP session of the local client; more are refused")
	// MCP tasks (mcp/tasks.go), on stdio and the socket: bound to the
	// front end's own configuration, which checks itself (Validate).
	o.mcp.Tasks = mcp.DefaultTaskOptions()
	fs.DurationVar(&o.mcp.Tasks.TTL, "task-ttl", o.mcp.Tasks.TTL, "how long an MCP task's result is kept after the task ends (a client may ask for less)")
	fs.IntVar(&o.mcp.Tasks.ClientMax, "client-max-tasks", o.mcp.Tasks.ClientMax, "MCP tasks one client may hold, running or kept; more task-augmented calls are refused (2025-11-25) or answered without a task (2026-07-28)")
	fs.Var(bytesize.Var(&o.mcp.Tasks.ClientBytes), "client-task-bytes", "bytes of ended MCP tasks' results one client's tasks keep for --task-ttl (their JSON); past it the client's oldest kept results are dropped (bytes or 32MiB)")
	fs.DurationVar(&o.mcp.Tasks.After, "task-after", o.mcp.Tasks.After, "MCP 2026-07-28: a call of a client that takes tasks is answered with a task when it has not ended after this long (0: at once)")
}

func (o *options) checkLocal() error {
	switch o.attach {
	case "auto", "never", "required":
	default:
		return fmt.Errorf("attach must be auto, never or required, not %q", o.attach)
	}
	return o.socketConns.Validate()
}

// stdioSocket is the socket `pyrun stdio` attaches to: --socket, else the
// user's runtime folder's pyrun.sock; empty when there is neither.
func (o *options) stdioSocket() string {
	if o.socket != "" && o.socket != socketDefault {
		return o.socket
	}
	return localsock.DefaultPath()
}

// socketDefault is the --socket value that stands for the path `pyrun
// stdio` looks at by default, so that `pyrun serve --socket default`
// serves where stdio will look, with no variable to spell (or leave
// unset).
const socketDefault = "default"

// serveSocket is the socket `pyrun serve` makes: --socket, or with
// `default` the path stdio looks at; "" without one.
func (o *options) serveSocket() (string, error) {
	if o.socket != socketDefault {
		return o.socket, nil
	}
	path := localsock.DefaultPath()
	if path == "" {
		return "", fmt.Errorf("--socket default: XDG_RUNTIME_DIR is unset and /run/user/%d does not exist, so pyrun stdio has no socket to look at by default: give --socket PATH to both", os.Getuid())
	}
	return path, nil
}

// socketDoubt says what looks wrong with a socket path the user gave, as
// when a variable in it was empty (`--socket $XDG_RUNTIME_DIR/pyrun.sock`
// without XDG_RUNTIME_DIR makes /pyrun.sock, where no stdio looks): ""
// when nothing does. The path is used all the same; this is a warning.
func socketDoubt(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	var doubt string
	top := string(filepath.Separator) + strings.SplitN(strings.TrimPrefix(abs, string(filepath.Separator)), string(filepath.Separator), 2)[0]
	switch {
	case strings.Contains(path, "$"):
		doubt = "it holds a $, as a variable nothing expanded does (a config file's values are taken as they are)"
	case filepath.Dir(abs) == string(filepath.Separator):
		doubt = "it is in /, as when the variable before /" + filepath.Base(abs) + " was empty"
	case top != abs && !exists(top):
		doubt = "its top folder " + top + " does not exist, as when a variable before it was empty"
	default:
		return ""
	}
	if d := localsock.DefaultPath(); d == "" {
		return doubt + "; pyrun stdio has no socket to look at by default here (XDG_RUNTIME_DIR is unset and /run/user/" + strconv.Itoa(os.Getuid()) + " does not exist): give it the same --socket"
	} else if d != abs {
		return doubt + "; pyrun stdio looks at " + d + " by default (--socket default serves there)"
	}
	return doubt
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// attachTimeout bounds the connect to the service's socket. A Unix socket
// answers at once (a listening socket accepts into its backlog, even
// while a socket-activated service is still starting); this only guards
// against a socket file on a hung file system.
const attachTimeout = 2 * time.Second

// attachConn connects to the service for `pyrun stdio`, as --attach says:
// nil when it should serve with a pool of its own. It does nothing
// expensive: no runtime, no pool, no config watcher.
func attachConn(o *options, log hclog.Logger) (*net.UnixConn, error) {
	if o.attach == "never" {
		return nil, nil
	}
	path := o.stdioSocket()
	if o.socket != "" && o.socket != socketDefault {
		if doubt := socketDoubt(path); doubt != "" {
			log.Warn("the socket's path looks wrong: "+doubt, "socket", path)
		}
	}
	if path == "" {
		if o.attach == "required" {
			return nil, errors.New("--attach required: no socket to attach to (give --socket PATH, or run in a login session, where XDG_RUNTIME_DIR is set)")
		}
		return nil, nil
	}
	c, err := localsock.Dial(path, attachTimeout)
	if err == nil {
		// The service's settings serve an attached client, not these.
		if own := o.ownSettings(); len(own) > 0 {
			flags := "--" + strings.Join(own, ", --")
			if o.attach == "auto" {
				c.Close()
				log.Warn("not attaching to the pyrun service: "+flags+" set here would not apply there (an attached client gets the service's settings); serving with a pool of my own. Set them on the service, or give --attach required to use it as it is", "socket", path)
				return nil, nil
			}
			log.Warn("attached to the pyrun service: "+flags+" set here do not apply (an attached client gets the service's settings); set them on the service", "socket", path)
		}
	}
	if err != nil {
		if o.attach == "required" {
			return nil, fmt.Errorf("--attach required: no pyrun service answers at %s: %w (start one: systemctl --user start pyrun.socket, or pyrun serve --socket %s)", path, err, path)
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			log.Debug("no pyrun service on the socket: serving with a pool of my own", "socket", path)
		} else {
			log.Warn("not attaching to the socket: serving with a pool of my own", "socket", path, "error", err)
		}
		return nil, nil
	}
	return c, nil
}

// bridgeSettings are the stdio flags that still apply when attached: the
// bridge's own, and where the runtime is (the service has its own, and it
// changes no result).
var bridgeSettings = []string{"attach", "socket", "config", "log-level", "log-format", "runtime-dir"}

// ownSettings are the stdio flags o sets to other values than their
// defaults (on the command line or in its config file), which a service
// it attached to would not apply: its pool, limits, languages, sessions.
func (o *options) ownSettings() []string {
	var d options
	d.flagSet("defaults") // binds d's fields to their defaults
	mine, defaults := o.settings(), d.settings()
	var own []string
	for _, name := range commandFlags("stdio") {
		if !slices.Contains(bridgeSettings, name) && mine[name] != defaults[name] {
			own = append(own, name)
		}
	}
	return own
}

// bridge copies stdin to the service and the service's answers to stdout,
// byte for byte, until one side ends: the client closing stdin ends the
// session (the service sees the end of its input and hangs up, after which
// bridge returns nil); the service hanging up first (it stopped or
// restarted) ends it with an error, and the client sees its server go, as
// when a stdio server exits. No MCP is parsed here: the service's line
// filter and the go-sdk's transport are the session's, as on stdio.
// The goroutine copying stdin may still be blocked reading it when bridge
// returns; the process exits right after.
func bridge(ctx context.Context, c *net.UnixConn, path string, stdin io.Reader, stdout io.Writer, log hclog.Logger) error {
	defer c.Close()
	log.Debug("attached to the pyrun service", "socket", path)
	clientDone := make(chan struct{})
	go func() {
		if _, err := io.Copy(c, stdin); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Debug("reading the client's requests", "error", err)
		}
		// The end of the client's input, passed on: the service ends the
		// session and hangs up. Marked before it is passed on, so that the
		// service hanging up after it is not taken for the service going.
		close(clientDone)
		_ = c.CloseWrite()
	}()
	down := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdout, c)
		down <- err
	}()
	select {
	case err := <-down:
		select {
		case <-clientDone:
			return nil // the client hung up first; the service followed
		default:
		}
		if err != nil {
			return fmt.Errorf("the pyrun service at %s: %w", path, err)
		}
		return fmt.Errorf("the pyrun service at %s closed the connection (it stopped or restarted): this session is over", path)
	case <-ctx.Done():
		_ = c.Close()
		<-down
		return nil
	}
}

// socketListeners are the listeners `pyrun serve` serves on: socket
// activation's, when systemd passed any (a TCP one replaces --listen, a
// Unix one is the socket), else --listen's and --socket's own. sock is nil
// without a socket.
func socketListeners(o *options, log hclog.Logger) (httpLn, sock net.Listener, err error) {
	path, err := o.serveSocket()
	if err != nil {
		return nil, nil, err
	}
	inherited, err := localsock.Inherited()
	if err != nil {
		return nil, nil, err
	}
	for _, ln := range inherited {
		switch a := ln.Addr().(type) {
		case *net.UnixAddr:
			if sock != nil {
				return nil, nil, closeAll(inherited, fmt.Errorf("socket activation: more than one Unix socket (%s, %s)", sock.Addr(), a))
			}
			if path != "" && a.Name != path {
				return nil, nil, closeAll(inherited, fmt.Errorf("socket activation passed the socket %s, but --socket is %s", a.Name, path))
			}
			sock = ln
			if st, err := os.Stat(a.Name); err == nil && st.Mode().Perm()&0o077 != 0 {
				log.Warn("the activated socket is open to other users (set SocketMode=0600): their connections are refused, but they can reach it", "socket", a.Name, "mode", st.Mode().Perm().String())
			}
		case *net.TCPAddr:
			if httpLn != nil {
				return nil, nil, closeAll(inherited, fmt.Errorf("socket activation: more than one TCP socket (%s, %s)", httpLn.Addr(), a))
			}
			// What --listen's address would have to pass, the address
			// systemd listens on passes too.
			oc := *o
			oc.listen = a.String()
			if err := checkListen(&oc, log); err != nil {
				return nil, nil, closeAll(inherited, err)
			}
			httpLn = ln
		default:
			return nil, nil, closeAll(inherited, fmt.Errorf("socket activation: a socket of another kind (%s)", a.Network()))
		}
	}
	if len(inherited) > 0 {
		log.Info("socket activation", "sockets", len(inherited))
	}
	if sock == nil && path != "" {
		if doubt := socketDoubt(path); doubt != "" {
			log.Warn("the socket's path looks wrong: "+doubt, "socket", path)
		}
		if sock, err = localsock.Listen(path); err != nil {
			return nil, nil, closeAll(inherited, err)
		}
	}
	if httpLn == nil && o.listen == listenNone {
		if sock == nil {
			return nil, nil, errors.New("listen none: no HTTP, and no --socket either: nothing to serve on")
		}
		httpLn = newNoListener()
	}
	if httpLn == nil {
		if httpLn, err = net.Listen("tcp", o.listen); err != nil {
			if sock != nil {
				sock.Close()
			}
			return nil, nil, closeAll(inherited, fmt.Errorf("listen: %w", err))
		}
	}
	return httpLn, sock, nil
}

func closeAll(lns []net.Listener, err error) error {
	for _, ln := range lns {
		ln.Close()
	}
	return err
}

// socketService runs the socket's sessions for `pyrun serve`.
type socketService struct {
	ln     *localsock.Listener
	cancel context.CancelFunc // ends the sessions
	done   chan struct{}      // closed when they have all ended
}

// startSocket serves MCP on ln until stopSocket.
func (s *service) startSocket(ln *localsock.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	s.socket = socketService{ln: ln, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.socket.done)
		if err := s.d.srv.ServeSocket(ctx, ln); err != nil {
			s.log.Error("socket", "error", err)
		}
	}()
}

// drain stops taking connections on the socket; the open sessions go on
// (their new calls are refused by the closing pool, as over HTTP).
func (ss socketService) drain() {
	if ss.ln != nil {
		_ = ss.ln.Close()
	}
}

// stopSocket ends the socket's sessions (their clients see the server go)
// and waits for them. It may be called more than once.
func (s *service) stopSocket() {
	ss := s.socket
	if ss.ln == nil {
		return
	}
	ss.drain()
	ss.cancel()
	<-ss.done
}

// socketName is the socket's path for the log, or "" without one.
func socketName(sock net.Listener) string {
	if sock == nil {
		return ""
	}
	return sock.Addr().String()
}

// listenNone is the --listen value of a service without HTTP: the socket's
// alone (a user's service, beside a system one on 127.0.0.1:3001).
const listenNone = "none"

// noListener stands for the HTTP listener of --listen none: it accepts
// nothing until it is closed, so the HTTP server's start and graceful
// shutdown stay as they are.
type noListener struct {
	once   sync.Once
	closed chan struct{}
}

func newNoListener() *noListener { return &noListener{closed: make(chan struct{})} }

func (l *noListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *noListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *noListener) Addr() net.Addr { return noAddr{} }

type noAddr struct{}

func (noAddr) Network() string { return "none" }
func (noAddr) String() string  { return listenNone }

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Python sessions: their flags, and the Manager that keeps them for the
// stdio and HTTP front ends.

// sessionFlags declares the sessions' flags on fs.
func (o *options) sessionFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.sessionIdle, "session-idle", sessions.DefaultIdle, "a Python session (session_id) ends after this long without a call")
	fs.DurationVar(&o.sessionMaxAge, "session-max-age", sessions.DefaultMaxAge, "a Python session ends this long after it started")
	fs.IntVar(&o.maxSessions, "max-sessions", sessions.DefaultMax, "Python sessions open at once, each with a worker of its own besides the pool's")
	fs.IntVar(&o.clientMaxSessions, "client-max-sessions", sessions.DefaultClientMax, "serve, with access control: Python sessions one client may have open")
	fs.IntVar(&o.sessionSpares, "session-spares", sessions.DefaultSpares, "workers started ahead for new Python sessions once one has started, so that a \"new\" call does not wait for a worker start (0: none)")
	fs.StringVar(&o.instanceID, "instance-id", "", "this pyrun's name, the start of its session ids, for load balancers to route on (letters, digits and '-'; default: the host name so reduced)")
}

func (o *options) checkSessions() error {
	switch {
	case o.sessionIdle <= 0:
		return fmt.Errorf("session-idle must be positive, not %s", o.sessionIdle)
	case o.sessionMaxAge <= 0:
		return fmt.Errorf("session-max-age must be positive, not %s", o.sessionMaxAge)
	}
	if err := firstError(
		outside("max-sessions", o.maxSessions, 1, 256),
		outside("client-max-sessions", o.clientMaxSessions, 1, 256),
		outside("session-spares", o.sessionSpares, 0, 16),
	); err != nil {
		return err
	}
	if o.instanceID == "" {
		return nil
	}
	if err := sessions.ValidInstance(o.instanceID); err != nil {
		return fmt.Errorf("instance-id: %w", err)
	}
	return nil
}

// instance is the instance id in force: the flag's, or the host's name.
func (o *options) instance() string {
	if o.instanceID == "" {
		return sessions.DefaultInstance()
	}
	return o.instanceID
}

func (o *options) sessionLimits() sessions.Limits {
	spares := o.sessionSpares
	if spares == 0 {
		spares = -1 // none; 0 is the default to sessions
	}
	return sessions.Limits{
		Idle: o.sessionIdle, MaxAge: o.sessionMaxAge, Max: o.maxSessions, ClientMax: o.clientMaxSessions,
		Spares: spares,
	}
}

func (o *options) mcpSessionOptions() mcp.SessionOptions {
	return mcp.SessionOptions{Idle: o.sessionIdle, MaxAge: o.sessionMaxAge, Max: o.maxSessions, IdleCPU: o.idleCPU}
}

// startSessions keeps sessions of l on workers pool starts for them.
func startSessions(o *options, l lang.Language, pool *supervisor.Pool, log hclog.Logger) *sessions.Manager {
	return sessions.New(sessions.Options{
		Instance: o.instance(),
		Language: l.Title,
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		},
		Limits:    o.sessionLimits(),
		Anonymous: mcp.Anonymous,
		Log:       log.Named("sessions"),
	})
}

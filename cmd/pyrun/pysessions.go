package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/checkpoint"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Python sessions: their flags, and the Manager that keeps them for the
// stdio and HTTP front ends.

// sessionFlags declares the sessions' flags on fs.
func (o *options) sessionFlags(fs *flag.FlagSet) {
	// The sessions' bounds, bound to sessions.Limits (which checks them).
	o.sessions.Limits = sessions.Limits{Idle: sessions.DefaultIdle, MaxAge: sessions.DefaultMaxAge, Max: defaultMaxSessions,
		ClientMax: defaultClientMaxSessions, MaxHosts: sessions.DefaultMaxHosts}
	fs.DurationVar(&o.sessions.Limits.Idle, "session-idle", o.sessions.Limits.Idle, "a Python session (session_id) ends after this long without a call")
	fs.DurationVar(&o.sessions.Limits.MaxAge, "session-max-age", o.sessions.Limits.MaxAge, "a Python session ends this long after it started")
	fs.IntVar(&o.sessions.Limits.Max, "max-sessions", o.sessions.Limits.Max, "sessions open at once, per language")
	fs.IntVar(&o.sessions.Limits.ClientMax, "client-max-sessions", o.sessions.Limits.ClientMax, "serve, with access control: sessions one client may have open, per language")
	fs.StringVar(&o.sessionWorker, "session-worker", sessionShared, "where sessions live: \"shared\" (namespaces on session workers of their client's, --sessions-per-worker each, which share the worker's interpreter) or \"own\" (a worker per session: for users behind one client's credentials who must not see each other's sessions)")
	fs.IntVar(&o.sessionsPerWorker, "sessions-per-worker", sessions.DefaultPerHost, "with --session-worker shared: sessions one session worker holds at most")
	fs.IntVar(&o.sessions.Limits.MaxHosts, "max-session-workers", o.sessions.Limits.MaxHosts, "worker processes for sessions at once, per language, spares included (with own session workers, also the most sessions)")
	fs.IntVar(&o.sessions.Limits.ClientMaxHosts, "client-max-session-workers", 0, "with --session-worker shared and access control: session workers one client's sessions may hold at once, per language, those restored from checkpoints (each onto a worker of its own) included, so that one client never holds every session worker (0: half of --max-session-workers, rounded up)")
	o.sessions.Limits.Spares = sessions.DefaultSpares
	fs.Var(noneCount(&o.sessions.Limits.Spares, 16), "session-spares", "workers started ahead for new Python sessions once one has started, so that a \"new\" call does not wait for a worker start (0: none)")
	o.supervisor.MaxCheckpoint = supervisor.DefaultMaxCheckpoint
	fs.StringVar(&o.store.Where, "session-store", defaultSessionStore(), "where Python sessions' checkpoints are kept, so that a session whose worker is lost, or pyrun restarted, continues from its last one: dir:PATH, redis://HOST:PORT/DB (Redis or Valkey), or none")
	fs.StringVar(&o.store.KeyFile, "session-store-key-file", "", "a file of at least 32 bytes (openssl rand -hex 32 > FILE) whose key authenticates the checkpoints in --session-store, so that whoever can write to the store cannot make one pyrun restores; required with redis:// (every instance sharing the store has the same); a dir: store without one makes its own, .key in its folder")
	fs.DurationVar(&o.sessions.CheckpointDelay, "checkpoint-delay", sessions.DefaultCheckpointDelay, "a Python session's checkpoint is taken once it has had no call for this long after a result, off its calls' path")
	o.supervisor.RestoreSpares = supervisor.DefaultRestoreSpares
	fs.Var(noneCount(&o.supervisor.RestoreSpares, 4), "restore-spares", "worker processes kept started ahead for restores of Python sessions from checkpoints (a lost worker, a restart, a move, a fork), once one was taken, so that a restore does not wait for a worker's start (0: none)")
	fs.Var(bytesize.Var(&o.supervisor.MaxCheckpoint), "max-checkpoint", "largest checkpoint of a Python session's worker (its memory and files, before compression; on a shared session worker, all its sessions together); a larger one is not taken, and the log says so (bytes or 256MiB)")
	fs.DurationVar(&o.store.Lease, "session-lease", checkpoint.DefaultLeaseTTL, "with a --session-store that several pyrun instances share: how long an instance's hold on a Python session lasts unless renewed (it renews it while it serves the session), so how long a session of an instance that died waits before another instance can take it over")
	fs.DurationVar(&o.sessions.MoveWait, "session-move-wait", sessions.DefaultMoveWait, "with a shared --session-store: how long a call for a Python session that another live instance serves waits for that instance to hand it over, before it fails with an error that says to retry")
	fs.StringVar(&o.instanceID, "instance-id", "", "this pyrun's name, the start of its session ids, for load balancers to route on (letters, digits and '-'; default: the host name so reduced)")
}

func (o *options) checkSessions() error {
	if err := firstError(
		o.sessions.Validate(),
		o.store.Validate(),
		outside("sessions-per-worker", o.sessionsPerWorker, 1, 256),
	); err != nil {
		return err
	}
	if o.sessionWorker != sessionShared && o.sessionWorker != sessionOwn {
		return fmt.Errorf("session-worker must be %q or %q, not %q", sessionShared, sessionOwn, o.sessionWorker)
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

// Where sessions live (--session-worker).
const (
	sessionShared = "shared"
	sessionOwn    = "own"
	// Defaults of --max-sessions and --client-max-sessions: sessions are
	// namespaces (docs/sessions.md); their workers are bounded by
	// --max-session-workers.
	defaultMaxSessions       = 256
	defaultClientMaxSessions = 64
)

// sharedSessions says whether l's sessions are namespaces on shared
// workers: every language's, with --session-worker shared (docs/sessions.md).
func (o *options) sharedSessions(l lang.Language) bool {
	return o.sessionWorker != sessionOwn
}

// sessionWorkers is the most worker processes the sessions of one language
// have at once: a session worker holds at least one session.
func (o *options) sessionWorkers() int { return min(o.sessions.Limits.Max, o.sessions.Limits.MaxHosts) }

// setSessionLimits applies o's limits to every language's sessions, as
// after a reload.
func setSessionLimits(l *sessions.Languages, o *options) {
	for _, lg := range o.enabledLanguages() {
		if m := l.Manager(lg.ID); m != nil {
			m.SetLimits(o.sessionLimits(lg))
		}
	}
}

// defaultSessionStore is a folder in pyrun's state folder:
// $XDG_STATE_HOME/pyrun/sessions, or ~/.local/state/pyrun/sessions.
func defaultSessionStore() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "dir:" + filepath.Join(os.TempDir(), "pyrun-state", "sessions")
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return "dir:" + filepath.Join(dir, "pyrun", "sessions")
}

// sessionKeeper keeps the checkpoints of pool's sessions in the store
// --session-store names, or is nil for none.
func sessionKeeper(o *options, pool *supervisor.Pool, log hclog.Logger) *checkpoint.Keeper {
	k, err := o.store.Open(context.Background(), pool, o.supervisor.MaxCheckpoint, checkpoint.Holder(o.instance()), log)
	if err != nil {
		// Sessions work without checkpoints, as they did before them.
		log.Warn("python sessions' checkpoints are off", "error", err.Error())
	}
	return k
}

// startSessions keeps sessions of l on workers pool starts for them.
func startSessions(o *options, l lang.Language, pool *supervisor.Pool, log hclog.Logger) *sessions.Manager {
	perHost := 0
	if o.sharedSessions(l) {
		perHost = o.sessionsPerWorker
	}
	opts := o.sessions
	opts.Instance, opts.Language = o.instance(), l.Title
	opts.Start = func(ctx context.Context, exited func()) (sessions.Worker, error) {
		return pool.StartDedicated(ctx, exited)
	}
	opts.Limits, opts.Anonymous = o.sessionLimits(l), mcp.Anonymous
	opts.Log, opts.PerHost = log.Named("sessions"), perHost
	opts.SpareAfter = func(ctx context.Context) {
		// The pool's workers first: a session worker starting beside
		// them would slow the first call's.
		for ctx.Err() == nil {
			if st := pool.Stats(); st.Ready+st.Busy >= st.Workers || st.StartError != "" {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// Checkpoints are memory snapshots: only an engine whose workers make
	// them takes them (Pyodide's).
	if l.Engine.Features().Snapshots {
		if k := sessionKeeper(o, pool, log.Named("checkpoints")); k != nil {
			opts.Checkpoints, opts.Leases = k, k
		}
	}
	return sessions.New(opts)
}

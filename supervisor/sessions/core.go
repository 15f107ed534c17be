package sessions

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// core is what a Manager shares with its collaborators (placement,
// durability, leases): the one lock that guards them all, the limits in
// force, whether Close has begun, and the goroutines Close waits for. One
// lock, not one each: a session's turn, its worker's host and its
// checkpoint change together.
type core struct {
	log  hclog.Logger
	lang string // Options.Language, or Python

	wake chan struct{} // tells the expiry loop to look again
	wg   sync.WaitGroup
	// closing is cancelled by Close: a spare's start is aborted.
	closing       context.Context
	cancelClosing context.CancelFunc

	mu     sync.Mutex
	limits Limits // guarded by mu
	closed bool   // guarded by mu: Close has begun
}

func newCore(log hclog.Logger, lang string, limits Limits) *core {
	c := &core{log: log, lang: lang, wake: make(chan struct{}, 1), limits: limits.withDefaults()}
	c.closing, c.cancelClosing = context.WithCancel(context.Background())
	return c
}

// kick tells the expiry loop to look again.
func (c *core) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// closeWorker stops w in the background. c.mu is held.
func (c *core) closeWorker(w Worker) {
	if w == nil {
		return // a session of a previous run, not restored yet
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		w.Close()
	}()
}

// inBackground runs f off the caller's path, with checkpointLimit for its
// store calls; Close waits for it. The caller may hold c.mu.
func (c *core) inBackground(f func(ctx context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), checkpointLimit)
		defer cancel()
		f(ctx)
	}()
}

// errorf is an error of cond in c's language: cond's words, then
// format's.
func (c *core) errorf(cond error, format string, args ...any) error {
	cd := cond.(condition)
	return &sessionError{cond: cd, msg: fmt.Sprintf(string(cd), c.lang+" ") + fmt.Sprintf(format, args...)}
}

package supervisor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Deno's cache (DENO_DIR) holds what Deno compiled of a worker's program:
// V8's code cache, transpiled TypeScript, the analysis of npm packages.
// Without it a Python worker's start took 17% more CPU (1.29 s against
// 1.51 s, medians of 10 starts from the snapshot at load average 3). It is
// shared by every worker, so behind the OS sandbox no worker may write it:
// a worker whose Deno or V8 was subverted could put code there that every
// later worker would run, other clients' workers too. Workers
// read it; a primer writes it. The primer is a worker started exactly as
// the pool's are, with write access to the cache, which takes no call and
// is stopped as soon as it is ready: it runs pyrun's code alone. One runs
// once per runtime and engine (a marker file in the cache says it did),
// before the first worker that needs it; the snapshot maker, which runs no
// code of a call either, writes the cache too.

// cachePrimer primes Deno's cache for one pool's engine. Safe for
// concurrent use.
type cachePrimer struct {
	rt  *Runtime
	e   Engine
	log hclog.Logger

	mu   sync.Mutex
	done bool
}

func newCachePrimer(rt *Runtime, e Engine, log hclog.Logger) *cachePrimer {
	return &cachePrimer{rt: rt, e: e, log: log}
}

// primedMarker is the file that says the cache holds what workers of e
// from rt compile.
func primedMarker(rt *Runtime, e Engine) string {
	return filepath.Join(rt.DenoDir, ".primed-"+rt.Hash+"-"+e.Name())
}

// ensure primes the cache unless that was done, for workers of cfg that
// start from snap (nil: plainly). A failure is logged, not returned: the
// worker's own start then says what is wrong, or runs without the cache.
func (c *cachePrimer) ensure(ctx context.Context, cfg Config, snap *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if !cacheReadOnly(cfg) {
		return // workers write it themselves (no Landlock)
	}
	marker := primedMarker(c.rt, c.e)
	if _, err := os.Stat(marker); err == nil {
		c.done = true
		return
	}
	if err := c.prime(ctx, cfg, snap, marker); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("could not fill Deno's cache: workers will start without it, slower", "error", err)
		}
		return
	}
	c.done = true
}

func (c *cachePrimer) prime(ctx context.Context, cfg Config, snap *Snapshot, marker string) error {
	unlock, err := lockFile(ctx, filepath.Join(c.rt.DenoDir, ".prime.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(marker); err == nil {
		return nil // another process primed it while we waited
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cmd := exec.Command(c.rt.Deno)
	if err := workerCmd(cmd, c.rt, c.e, cfg, launch{snapshot: snap, primeCache: true}); err != nil {
		return err
	}
	w, err := startWorker(ctx, "cache-primer", cmd, cfg, c.log, nil, nil, nil)
	if err != nil {
		return err
	}
	w.close() // closes its stdin: it exits, its cache written
	c.log.Debug("Deno's cache filled", "engine", c.e.Name())
	return os.WriteFile(marker, nil, 0o644)
}

// cacheReadOnly says whether workers of cfg may only read Deno's cache:
// when the OS sandbox's Landlock layer is in force.
func cacheReadOnly(cfg Config) bool {
	layers, err := wallLayers(cfg)
	return err == nil && layers.Landlock
}

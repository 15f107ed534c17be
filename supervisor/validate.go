package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/supervisor/oswall"
	"github.com/pyrun/pyrun/supervisor/packages"
)

// Validate checks the settings of c a user sets (pyrun's flags and config
// keys, docs/configuration.md), where a zero is a value, not the default
// (and -1 none, for WarmCalls and RestoreSpares): each out-of-range one is
// named as the setting is. The fields pyrun works out itself (each
// language's size and memory limit, the files a call returns, the spool
// folder, whether checkpoints are on) are checked where they are set.
func (c Config) Validate() error {
	if _, err := ParseNetwork(string(c.Network)); err != nil {
		return err
	}
	if _, err := ParseIsolation(string(c.Isolation)); err != nil {
		return err
	}
	if _, err := oswall.ParseMode(string(c.OSSandbox)); err != nil {
		return err
	}
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("timeout must be positive, not %s", c.Timeout)
	case c.MaxOutput < 1<<10:
		return fmt.Errorf("max-output must be at least 1KiB, not %s", bytesize.Format(int64(c.MaxOutput)))
	case c.MaxOutput > 64<<20:
		return fmt.Errorf("max-output must be at most 64MiB, not %s", bytesize.Format(int64(c.MaxOutput)))
	case c.MaxQueue < 0:
		return fmt.Errorf("max-queue must not be negative, not %d", c.MaxQueue)
	case c.QueueTimeout <= 0:
		return fmt.Errorf("queue-timeout must be positive, not %s", c.QueueTimeout)
	case c.ClientWorkerIdle < time.Second:
		return fmt.Errorf("client-worker-idle must be at least 1s, not %s", c.ClientWorkerIdle)
	case !(c.IdleCPU >= 0.01 && c.IdleCPU <= 1):
		return fmt.Errorf("idle-cpu must be between 0.01 and 1 (a share of one CPU), not %g", c.IdleCPU)
	case c.IdleMemorySlack < 0:
		return fmt.Errorf("idle-memory-slack must not be negative, not %s", bytesize.Format(c.IdleMemorySlack))
	case c.WorkerFileSize < 1<<20:
		return fmt.Errorf("worker-file-size must be at least 1MiB, not %s", bytesize.Format(c.WorkerFileSize))
	case c.MaxCheckpoint < 32<<20:
		return fmt.Errorf("max-checkpoint must be at least 32MiB (an empty session's memory), not %s", bytesize.Format(c.MaxCheckpoint))
	}
	for _, err := range []error{
		between("max-worker-threads", c.MaxWorkerThreads, 16, 4096, false),
		between("worker-log-per-call", c.StderrLogPerCall, 1<<10, 64<<20, true),
		between("worker-log-rate", c.StderrLogRate, 1<<10, 64<<20, true),
		between("worker-open-files", c.WorkerOpenFiles, 64, 1<<20, false),
		between("client-max-workers", c.ClientMaxWorkers, 0, 4096, false),
		between("max-displays", c.MaxDisplays, 1, 1024, false),
		between("max-display-bytes", c.MaxDisplayBytes, 1<<10, 64<<20, true),
		between("warm-calls", max(c.WarmCalls, 0), 0, 10000, false),
		between("restore-spares", max(c.RestoreSpares, 0), 0, 4, false),
	} {
		if err != nil {
			return err
		}
	}
	for _, d := range c.Deps {
		if _, err := packages.ParseRequirement(d); err != nil {
			return fmt.Errorf("deps: %w", err)
		}
	}
	if c.Wheelhouse != "" {
		if st, err := os.Stat(c.Wheelhouse); err != nil || !st.IsDir() {
			return fmt.Errorf("wheelhouse %s is not a directory", c.Wheelhouse)
		}
	}
	if c.PyPI != "none" && !packages.IsURL(c.PyPI) {
		return fmt.Errorf("pypi must be a URL or none, not %q", c.PyPI)
	}
	if ix := c.PackageIndex; ix != "" && !packages.IsURL(ix) {
		if _, err := os.Stat(filepath.Join(ix, "pyodide-lock.json")); err != nil {
			return fmt.Errorf("package-index %s: not a URL, and not a directory with a pyodide-lock.json", ix)
		}
	}
	return nil
}

// between is the error of setting name's value v when it is not between
// lo and hi, written as sizes when size is set (1KiB); nil when it is.
func between(name string, v, lo, hi int, size bool) error {
	if v >= lo && v <= hi {
		return nil
	}
	if size {
		f := func(n int) string { return bytesize.Format(int64(n)) }
		return fmt.Errorf("%s must be between %s and %s, not %s", name, f(lo), f(hi), f(v))
	}
	return fmt.Errorf("%s must be between %d and %d, not %d", name, lo, hi, v)
}

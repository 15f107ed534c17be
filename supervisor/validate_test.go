package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages"
)

// The pools' configuration checks the settings a user sets, naming each as
// the flag is called; what pyrun's defaults give passes.
func TestConfigValidate(t *testing.T) {
	good := func() supervisor.Config {
		return supervisor.Config{Timeout: 30 * time.Second, MaxOutput: 64 << 10, QueueTimeout: time.Minute,
			ClientWorkerIdle: supervisor.DefaultClientWorkerIdle, IdleCPU: supervisor.DefaultIdleCPU,
			WorkerFileSize: 1 << 30, MaxWorkerThreads: supervisor.DefaultMaxWorkerThreads,
			StderrLogPerCall: supervisor.DefaultStderrLogPerCall, StderrLogRate: supervisor.DefaultStderrLogRate,
			WorkerOpenFiles: 1024, MaxDisplays: 16, MaxDisplayBytes: 4 << 20, PyPI: packages.DefaultPyPI,
			Network: supervisor.NetworkPublic, Isolation: supervisor.IsolationCall, OSSandbox: "auto",
			MaxCheckpoint: supervisor.DefaultMaxCheckpoint, WarmCalls: supervisor.DefaultWarmCalls, RestoreSpares: -1}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*supervisor.Config)
		want string
	}{
		{func(c *supervisor.Config) { c.Timeout = 0 }, "timeout must be positive, not 0s"},
		{func(c *supervisor.Config) { c.MaxOutput = 512 }, "max-output must be at least 1KiB, not 512"},
		{func(c *supervisor.Config) { c.MaxOutput = 128 << 20 }, "max-output must be at most 64MiB, not 128MiB"},
		{func(c *supervisor.Config) { c.Network = "lan" }, `network must be none, packages, public or all, not "lan"`},
		{func(c *supervisor.Config) { c.Isolation = "vm" }, "isolation must be call or process"},
		{func(c *supervisor.Config) { c.OSSandbox = "maybe" }, "maybe"},
		{func(c *supervisor.Config) { c.IdleCPU = 2 }, "idle-cpu must be between 0.01 and 1"},
		{func(c *supervisor.Config) { c.StderrLogRate = 100 }, "worker-log-rate must be between 1KiB and 64MiB, not 100"},
		{func(c *supervisor.Config) { c.MaxWorkerThreads = 8 }, "max-worker-threads must be between 16 and 4096, not 8"},
		{func(c *supervisor.Config) { c.Deps = []string{"not a requirement!"} }, "deps:"},
		{func(c *supervisor.Config) { c.Wheelhouse = "/nonexistent/wheels" }, "wheelhouse /nonexistent/wheels is not a directory"},
		{func(c *supervisor.Config) { c.PyPI = "pypi.org" }, `pypi must be a URL or none, not "pypi.org"`},
		{func(c *supervisor.Config) { c.MaxCheckpoint = 1 << 20 }, "max-checkpoint must be at least 32MiB (an empty session's memory), not 1MiB"},
		{func(c *supervisor.Config) { c.WarmCalls = 20000 }, "warm-calls must be between 0 and 10000, not 20000"},
		{func(c *supervisor.Config) { c.RestoreSpares = 5 }, "restore-spares must be between 0 and 4, not 5"},
	} {
		cfg := good()
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

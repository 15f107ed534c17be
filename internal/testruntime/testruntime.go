// Package testruntime gives the tests that run the real worker runtime
// (Deno, Pyodide, webR) the runtime, provisioned as pyrun does, in pyrun's
// default runtime folder, once per test binary: runs after the first one
// reuse it. A test that calls Get is of the full tier (testtier): under
// -short it is skipped.
//
//	func TestRealWorker(t *testing.T) {
//		rt := testruntime.Get(t)
//		p, err := supervisor.NewPool(rt, cfg, log)
//		...
//	}
//
// The supervisor's own in-package tests cannot import it (it imports the
// supervisor) and provision the runtime themselves.
package testruntime

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/testtier"
	"github.com/pyrun/pyrun/supervisor"
)

// provisionTimeout bounds the first provisioning, which installs Deno,
// Pyodide and webR from npm on a machine that has none yet.
const provisionTimeout = 10 * time.Minute

var (
	once sync.Once
	rt   *supervisor.Runtime
	err  error
)

// Get skips t under -short; otherwise it returns the worker runtime,
// provisioning it on the first call, or fails t if it cannot be. npm's
// progress and the provisioning's warnings go to stderr: they belong to no
// one test.
func Get(t testing.TB) *supervisor.Runtime {
	t.Helper()
	testtier.Runtime(t)
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
		defer cancel()
		log := hclog.New(&hclog.LoggerOptions{Name: "provision", Output: os.Stderr, Level: hclog.Warn})
		rt, err = supervisor.Provision(ctx, supervisor.DefaultRuntimeRoot(), os.Stderr, log)
	})
	if err != nil {
		t.Fatalf("provision the worker runtime: %v", err)
	}
	return rt
}

// Package mcptest has stand-ins for the worker pool behind pyrun's MCP
// server (an mcp.Runner), for the tests of the MCP and HTTP front ends that
// need no Deno, Pyodide or webR: a Runner made of a function, and a Gate
// whose calls run until the test lets them finish; and the bounded waits
// such tests share (Receive from a channel, Eventually for a condition).
//
//	g := mcptest.NewGate()
//	srv := mcp.New(g, mcp.Options{}, log)
//	go client.CallTool(...)
//	g.WaitStarted(t, mcp.Anonymous)
//	g.Release(mcp.Anonymous)
package mcptest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Func is a Runner made of a function: the call's result.
type Func func(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error)

// Run calls f.
func (f Func) Run(ctx context.Context, job supervisor.Job, ev supervisor.Events) (supervisor.Result, error) {
	return f(ctx, job, ev)
}

// Result is a Runner whose every call returns res at once.
func Result(res supervisor.Result) Func {
	return func(context.Context, supervisor.Job, supervisor.Events) (supervisor.Result, error) { return res, nil }
}

// Gate is a Runner whose calls run until the test lets them finish (a
// success), or until their context ends (its error). Its methods are safe
// for concurrent use.
type Gate struct {
	// Started receives the client of each call as it reaches the gate.
	Started chan string

	mu      sync.Mutex
	running map[string]int           // by client
	finish  map[string]chan struct{} // a send lets one call of the client finish
}

// NewGate makes a Gate with room for 100 starts not yet received.
func NewGate() *Gate {
	return &Gate{running: map[string]int{}, finish: map[string]chan struct{}{}, Started: make(chan string, 100)}
}

func (g *Gate) ch(client string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.finish[client] == nil {
		g.finish[client] = make(chan struct{})
	}
	return g.finish[client]
}

// Run holds the call until Release or the end of ctx.
func (g *Gate) Run(ctx context.Context, job supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
	finish := g.ch(job.Client)
	g.mu.Lock()
	g.running[job.Client]++
	g.mu.Unlock()
	g.Started <- job.Client
	defer func() {
		g.mu.Lock()
		g.running[job.Client]--
		g.mu.Unlock()
	}()
	select {
	case <-finish:
		return supervisor.Result{Status: supervisor.StatusSuccess}, nil
	case <-ctx.Done():
		return supervisor.Result{}, ctx.Err()
	}
}

// Release lets one running call of client finish; it waits for one.
func (g *Gate) Release(client string) { g.ch(client) <- struct{}{} }

// Running is how many calls of client the gate holds.
func (g *Gate) Running(client string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[client]
}

// WaitStarted fails t unless a call of client reaches the gate within 30s
// (a call of megabytes takes seconds to decode under -race on a loaded
// machine).
func (g *Gate) WaitStarted(t testing.TB, client string) {
	t.Helper()
	select {
	case c := <-g.Started:
		if c != client {
			t.Fatalf("a call of %s reached the pool, want one of %s", c, client)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no call of %s reached the pool", client)
	}
}

// NoneStarted fails t if a call reached the gate that was not received.
func (g *Gate) NoneStarted(t testing.TB) {
	t.Helper()
	select {
	case c := <-g.Started:
		t.Fatalf("a call of %s reached the pool past its limit", c)
	default:
	}
}

// Receive is the next value on ch: if none comes within the given time,
// the test fails with failure, which says what did not happen.
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

// Eventually polls cond every 10ms until it holds: if it does not within
// the given time, the test fails saying it timed out waiting for what.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// OutputFile is a file a call wrote under /output/, for a Result: path
// under /output/, its mime type and its bytes, spooled in a folder of t's.
func OutputFile(t testing.TB, path, mime string, data []byte) supervisor.OutputFile {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "spool-")
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("spool %s: %v", path, err)
	}
	sp, err := supervisor.SpoolFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return supervisor.OutputFile{Path: path, MIMEType: mime, Size: int64(len(data)), Data: sp}
}

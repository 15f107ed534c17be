// Package testtier sorts pyrun's tests into two tiers. The fast tier,
// `go test -short ./...`, runs every test that needs nothing but Go and
// this repository: pure code, the HTTP and MCP front ends on stand-in pools
// (mcp/mcptest), the supervisor against the test binary posing as a
// misbehaving worker. The full run, `go test ./...` (.ci/run), also runs
// the tests that need the worker runtime (Deno, Pyodide and webR from npm,
// provisioned on first use), the built binary, or other outside programs
// (MCP servers from npm, nginx, redis).
//
// A test of the full tier says so first thing, through the helper of what it
// needs, which skips it under -short:
//
//	func TestRealWorker(t *testing.T) {
//		testtier.Runtime(t)
//		...
//	}
package testtier

import "testing"

// Runtime skips t under -short: it runs the real worker runtime (Deno,
// Pyodide, webR), or the pyrun binary that does.
func Runtime(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs the worker runtime")
	}
}

// Needs skips t under -short: it runs what, a program from outside Go (MCP
// servers from npm, nginx, redis, a client from npm).
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs " + what)
	}
}

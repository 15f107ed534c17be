// Package codemodetest installs the real MCP servers that code mode's
// tests connect to: @modelcontextprotocol/server-memory, -everything and
// -filesystem, pinned by servers/package-lock.json, installed with npm ci
// on first use into servers/node_modules and run with node, so that nothing
// is fetched while a test runs.
package codemodetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gofrs/flock"

	"github.com/pyrun/pyrun/internal/testtier"
)

// dir is the servers folder, next to this file.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "servers")
}

// Install makes sure the servers are installed and returns the folder that
// holds them (node_modules/@modelcontextprotocol). Test binaries of several
// packages may call it at once: an flock serialises the install.
func Install(t testing.TB) string {
	t.Helper()
	testtier.Needs(t, "MCP servers from npm")
	d := dir()
	mods := filepath.Join(d, "node_modules", "@modelcontextprotocol")
	lock := flock.New(filepath.Join(d, ".install.lock"))
	if err := lock.Lock(); err != nil {
		t.Fatalf("lock the MCP servers' folder: %v", err)
	}
	defer lock.Close()
	if _, err := os.Stat(filepath.Join(mods, "server-filesystem", "dist", "index.js")); err == nil {
		return mods
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("code mode's tests need node and npm to install real MCP servers: %v", err)
	}
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = d
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", d, err, out)
	}
	return mods
}

// Command returns the command line that runs one of the servers
// ("memory", "everything", "filesystem") with node, plus args.
func Command(t testing.TB, server string, args ...string) (string, []string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("code mode's tests need node: %v", err)
	}
	script := filepath.Join(Install(t), "server-"+server, "dist", "index.js")
	return node, append([]string{script}, args...)
}

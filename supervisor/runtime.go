package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/hashicorp/go-hclog"

	pyodidehost "github.com/pyrun/pyrun/pyodide-host"
)

// Runtime is a provisioned folder holding Deno, Pyodide and pyrun's worker
// program. Workers read from it and write nothing into it.
type Runtime struct {
	Dir     string // the worker program and its node_modules
	Hash    string // identifies the worker program and its pinned versions
	Deno    string // the Deno binary
	DenoDir string // Deno's own cache (DENO_DIR)
	WorkDir string // the workers' working directory, empty
	// SnapshotDir holds memory snapshots of prepared workers; outside Dir,
	// and written only by pyrun itself (snapshot.go).
	SnapshotDir string
	// PackageDir caches the packages workers load; outside Dir, written
	// only by pyrun itself (packages.Resolver).
	PackageDir string
	Pyodide    string // Pyodide's version
	Python     string // the version of Python inside Pyodide
}

// ErrNoNPM means the runtime is not provisioned and npm is not there to do it.
var ErrNoNPM = errors.New("npm not found on PATH: pyrun installs Deno and Pyodide from the npm registry; install Node.js and npm")

// DefaultRuntimeRoot is where runtimes live unless configured otherwise:
// $XDG_CACHE_HOME/pyrun, or ~/.cache/pyrun.
func DefaultRuntimeRoot() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "pyrun")
}

// hostHash identifies the embedded worker program, so that a runtime built
// for another pyrun version is never used.
func hostHash() (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(pyodidehost.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := pyodidehost.Files.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Provision returns the runtime under root, installing it first when it is
// missing: the worker program is written out and `npm ci` fetches the pinned
// Deno and Pyodide. npm's progress goes to progress (pyrun's stderr).
// Concurrent calls, also from other processes, install once.
func Provision(ctx context.Context, root string, progress io.Writer, log hclog.Logger) (*Runtime, error) {
	hash, err := hostHash()
	if err != nil {
		return nil, fmt.Errorf("hash worker program: %w", err)
	}
	dir := filepath.Join(root, "host-"+hash)
	if rt, err := openRuntime(root, dir); err == nil {
		return rt, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create runtime root: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rt, err := openRuntime(root, dir); err == nil {
		return rt, nil // another process installed it while we waited
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, ErrNoNPM
	}
	// Clients wait for this without a word from pyrun (an MCP client's
	// initialize is answered once the pools exist): say what they wait for.
	log.Info("installing the worker runtime (Deno and Pyodide from npm, about 10 s); this happens once, and pyrun starts serving when it is done", "dir", dir)
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("clear partial runtime: %w", err)
	}
	if err := writeHostFiles(tmp); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	cmd.Stdout = progress // npm's stdout must never reach pyrun's (the MCP channel)
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("npm ci in %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("install runtime: %w", err)
	}
	rt, err := openRuntime(root, dir)
	if err != nil {
		return nil, err
	}
	log.Info("worker runtime installed", "deno", rt.Deno, "pyodide", rt.Pyodide, "python", rt.Python)
	pruneRuntimes(root, dir, log)
	return rt, nil
}

func writeHostFiles(dir string) error { return writeFiles(dir, pyodidehost.Files) }

// writeFiles writes the files of fsys, sub-folders included, into dir.
func writeFiles(dir string, fsys fs.ReadFileFS) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create runtime folder: %w", err)
	}
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Engines other than Python keep their programs in folders
			// of their own (webr/, js/).
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(p)), 0o755); err != nil {
				return fmt.Errorf("write worker program: %w", err)
			}
			return nil
		}
		b, err := fsys.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), b, 0o444); err != nil {
			return fmt.Errorf("write worker program: %w", err)
		}
		return nil
	})
}

// openRuntime checks an installed runtime folder and describes it.
func openRuntime(root, dir string) (*Runtime, error) {
	deno := filepath.Join(dir, "node_modules", "@deno", denoPlatform(), "deno")
	if st, err := os.Stat(deno); err != nil || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("no Deno binary at %s", deno)
	}
	lock, err := os.ReadFile(filepath.Join(dir, "node_modules", "pyodide", "pyodide-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("no Pyodide in %s: %w", dir, err)
	}
	var info struct {
		Info struct {
			Python string `json:"python"`
		} `json:"info"`
	}
	if err := json.Unmarshal(lock, &info); err != nil {
		return nil, fmt.Errorf("read pyodide-lock.json: %w", err)
	}
	pkg, err := os.ReadFile(filepath.Join(dir, "node_modules", "pyodide", "package.json"))
	if err != nil {
		return nil, fmt.Errorf("no Pyodide in %s: %w", dir, err)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(pkg, &meta); err != nil {
		return nil, fmt.Errorf("read Pyodide's package.json: %w", err)
	}
	rt := &Runtime{
		Dir:         dir,
		Hash:        strings.TrimPrefix(filepath.Base(dir), "host-"),
		Deno:        deno,
		DenoDir:     filepath.Join(root, "deno-cache"),
		WorkDir:     filepath.Join(root, "work"),
		SnapshotDir: filepath.Join(root, "snapshots"),
		PackageDir:  filepath.Join(root, "packages"),
		Pyodide:     meta.Version,
		Python:      info.Info.Python,
	}
	for _, d := range []string{rt.DenoDir, rt.WorkDir, rt.SnapshotDir, rt.PackageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// Mark it in use, for pruneRuntimes; a failure only makes it look stale.
	_ = os.WriteFile(filepath.Join(dir, ".last-used"), nil, 0o644)
	return rt, nil
}

// DenoVersion asks the Deno binary for its version line.
func (rt *Runtime) DenoVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, rt.Deno, "--version")
	cmd.Env = []string{"NO_COLOR=1", "DENO_DIR=" + rt.DenoDir}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("deno --version: %w", err)
	}
	line, _, _ := bytes.Cut(out, []byte("\n"))
	return strings.TrimPrefix(string(line), "deno "), nil
}

// denoPlatform names the npm package that carries Deno for this machine.
func denoPlatform() string {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	switch runtime.GOOS {
	case "linux":
		return "linux-" + arch + "-glibc"
	case "darwin":
		return "darwin-" + arch
	default:
		return runtime.GOOS + "-" + arch
	}
}

// staleAfter is how long a runtime of another pyrun version may go unused
// before a new install removes it.
const staleAfter = 14 * 24 * time.Hour

// pruneRuntimes removes runtimes of other pyrun versions that no pyrun has
// opened for staleAfter, so that upgrades do not pile up copies of Deno
// (95 MB each) while a pyrun of another version still running keeps its own.
func pruneRuntimes(root, keep string, log hclog.Logger) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "host-") || p == keep {
			continue
		}
		st, err := os.Stat(filepath.Join(p, ".last-used"))
		if err == nil && time.Since(st.ModTime()) < staleAfter {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("could not remove an old runtime", "dir", p, "error", err)
		}
	}
}

// lockFile takes an exclusive advisory lock, waiting for it as long as ctx
// allows (flock(2) on Unix, LockFileEx on Windows: gofrs/flock).
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	l := flock.New(path)
	ok, err := l.TryLockContext(ctx, 100*time.Millisecond)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("wait for runtime lock: %w", ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("lock runtime: %w", err)
	case !ok:
		return nil, errors.New("lock runtime: not taken")
	}
	return func() { _ = l.Close() }, nil
}

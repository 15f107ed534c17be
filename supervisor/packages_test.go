package supervisor_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

// Packages against real workers, from wheels the tests build: nothing
// reaches a network but loopback.

// ownPackages is the shared runtime with a package cache of the test's own.
func ownPackages(t *testing.T) *supervisor.Runtime {
	t.Helper()
	own := *testruntime.Get(t)
	own.PackageDir = t.TempDir()
	return &own
}

func wantStatus(t *testing.T, res supervisor.Result, status supervisor.Status) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status %s, want %s; error: %s; stdout: %s", res.Status, status, res.Error, res.Stdout)
	}
}

func TestPackagesFromAWheelhouse(t *testing.T) {
	wh := t.TempDir()
	packagestest.Demo(t, wh)
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Wheelhouse: wh, PyPI: "none"})

	t.Run("an import is found and loaded with its dependencies", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "import app\napp.NAME"})
		wantStatus(t, res, supervisor.StatusSuccess)
		if res.Value != `"app+mid+base"` {
			t.Errorf("value %s", res.Value)
		}
		if got := strings.Join(res.Dependencies, ","); got != "base,mid,app" {
			t.Errorf("dependencies %q, want base,mid,app", got)
		}
		// Loaded now: the next call on the worker loads nothing.
		res = run(t, p, supervisor.Job{Code: "import app\napp.NAME"})
		wantStatus(t, res, supervisor.StatusSuccess)
		if len(res.Dependencies) != 0 {
			t.Errorf("loaded again: %v", res.Dependencies)
		}
	})
	t.Run("an import takes the newest version", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "import pyrun_demo\npyrun_demo.VERSION"})
		wantStatus(t, res, supervisor.StatusSuccess)
		if res.Value != `"2.0"` {
			t.Errorf("version %s, want 2.0", res.Value)
		}
	})
	t.Run("a pin against the loaded version runs on a fresh worker", func(t *testing.T) {
		pinned := "# /// script\n# dependencies = [\"pyrun-demo==1.0\"]\n# ///\nimport pyrun_demo\npyrun_demo.VERSION"
		res := run(t, p, supervisor.Job{Code: pinned})
		wantStatus(t, res, supervisor.StatusSuccess)
		if res.Value != `"1.0"` {
			t.Errorf("version %s, want 1.0", res.Value)
		}
	})
	t.Run("an unsatisfiable pin is an install-error naming the package", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "# /// script\n# dependencies = [\"pyrun-demo>=3\"]\n# ///\nprint('never')"})
		wantStatus(t, res, supervisor.StatusInstallError)
		if !strings.Contains(res.Error, "pyrun-demo>=3") || !strings.Contains(res.Error, "cannot be satisfied") || res.Stdout != "" {
			t.Errorf("error %q, stdout %q", res.Error, res.Stdout)
		}
	})
	t.Run("an unknown package", func(t *testing.T) {
		res := run(t, p, supervisor.Job{Code: "# /// script\n# dependencies = [\"no-such-package\"]\n# ///\n1"})
		wantStatus(t, res, supervisor.StatusInstallError)
		if !strings.Contains(res.Error, "no-such-package") || !strings.Contains(res.Error, "no such package") {
			t.Errorf("error %q", res.Error)
		}
		// An import nothing provides is Python's to report.
		res = run(t, p, supervisor.Job{Code: "import no_such_module"})
		wantStatus(t, res, supervisor.StatusRunError)
		if !strings.Contains(res.Error, "ModuleNotFoundError: No module named 'no_such_module'") {
			t.Errorf("error %q", res.Error)
		}
	})
}

// TestPinAgainstAReusedWorker: a PEP 723 pin that conflicts with what an
// earlier call loaded into the worker moves to a fresh worker before any
// of its code runs, and gets what it pinned; its result is the one a clean
// pool gives. Where even a fresh worker has the other version (preloaded
// deps), the conflict is the call's install-error.
func TestPinAgainstAReusedWorker(t *testing.T) {
	wh := t.TempDir()
	for _, v := range []string{"1.2.0", "1.3.0"} {
		packagestest.Wheel{Name: "pyrun-pin", Version: v, Files: map[string]string{
			"pyrun_pin/__init__.py": "VERSION = '" + v + "'\nprint('imported', VERSION)\n",
		}}.Write(t, wh)
	}
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Wheelhouse: wh, PyPI: "none"})
	res := run(t, p, supervisor.Job{Code: "import pyrun_pin\npyrun_pin.VERSION"})
	wantStatus(t, res, supervisor.StatusSuccess)
	if res.Value != `"1.3.0"` {
		t.Fatalf("call 1 got %s, want the newest, 1.3.0", res.Value)
	}
	first := res.Worker
	pinned := "# /// script\n# dependencies = [\"pyrun-pin==1.2.0\"]\n# ///\nprint('ran once')\nimport pyrun_pin\npyrun_pin.VERSION"
	res = run(t, p, supervisor.Job{Code: pinned})
	wantStatus(t, res, supervisor.StatusSuccess)
	if res.Value != `"1.2.0"` || res.Stdout != "ran once\nimported 1.2.0\n" || res.Worker == first {
		t.Errorf("call 2: %s on %s (call 1 on %s), stdout %q; want 1.2.0 on a fresh worker, run once", res.Value, res.Worker, first, res.Stdout)
	}
	if strings.Join(res.Dependencies, ",") != "pyrun-pin" {
		t.Errorf("dependencies %v", res.Dependencies)
	}
	// The worker that had 1.3.0 loaded was retired for that, not counted
	// as a crash.
	if r := p.Stats().Counts.Restarts; r[supervisor.RestartPackages] != 1 || r[supervisor.RestartCrash] != 0 {
		t.Errorf("restarts %v, want one of kind packages", r)
	}

	// Preloaded 1.3.0: no worker can give 1.2.0, and the call says so.
	pre := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Wheelhouse: wh, PyPI: "none", Deps: []string{"pyrun-pin==1.3.0"}})
	res = run(t, pre, supervisor.Job{Code: pinned})
	wantStatus(t, res, supervisor.StatusInstallError)
	if !strings.Contains(res.Error, "pyrun-pin 1.3.0 is loaded in this worker") || res.Stdout != "" {
		t.Errorf("error %q, stdout %q", res.Error, res.Stdout)
	}
}

// TestPackageIndex serves a package index laid out like the Pyodide
// distribution, as a directory and over loopback HTTP, and checks that a
// restarted worker loads from the cache without a second download.
func TestPackageIndex(t *testing.T) {
	idx := t.TempDir()
	built := packagestest.Demo(t, idx)
	packagestest.Index(t, idx, built[1:], map[string][]string{"app": {"mid"}, "mid": {"base"}})

	t.Run("directory", func(t *testing.T) {
		p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, PackageIndex: idx, Network: supervisor.NetworkNone})
		res := run(t, p, supervisor.Job{Code: "import app, pyrun_demo\n[app.NAME, pyrun_demo.VERSION]"})
		wantStatus(t, res, supervisor.StatusSuccess)
		if res.Value != "[\n  \"app+mid+base\",\n  \"2.0\"\n]" {
			t.Errorf("value %s", res.Value)
		}
	})

	t.Run("loopback HTTP and cached across worker restarts", func(t *testing.T) {
		srv, hits := packagestest.Serve(t, idx)
		rt := ownPackages(t)
		p := snapshotPool(t, rt, supervisor.Config{Workers: 1, PackageIndex: srv.URL, Isolation: supervisor.IsolationProcess})
		for range 2 { // each call on a new worker
			res := run(t, p, supervisor.Job{Code: "import pyrun_demo\npyrun_demo.VERSION"})
			wantStatus(t, res, supervisor.StatusSuccess)
			if res.Value != `"2.0"` || strings.Join(res.Dependencies, ",") != "pyrun-demo" {
				t.Errorf("value %s, dependencies %v", res.Value, res.Dependencies)
			}
		}
		if n := hits("/" + filepath.Base(built[1].Path)); n != 1 {
			t.Errorf("the wheel was downloaded %d times, want once", n)
		}
	})
}

func TestPreloadedDeps(t *testing.T) {
	wh := t.TempDir()
	packagestest.Demo(t, wh)
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Wheelhouse: wh, Deps: []string{"pyrun-demo==1.0", "app"}})
	// Imported before the call: it neither loads nor imports anything.
	res := run(t, p, supervisor.Job{Code: "import sys\n[m in sys.modules for m in ('pyrun_demo', 'app', 'mid', 'base')]"})
	wantStatus(t, res, supervisor.StatusSuccess)
	if strings.Join(strings.Fields(res.Value), "") != "[true,true,true,true]" {
		t.Errorf("preloaded modules imported: %s", res.Value)
	}
	res = run(t, p, supervisor.Job{Code: "import pyrun_demo\npyrun_demo.VERSION"})
	wantStatus(t, res, supervisor.StatusSuccess)
	if res.Value != `"1.0"` || len(res.Dependencies) != 0 {
		t.Errorf("value %s, dependencies %v", res.Value, res.Dependencies)
	}

	// A reload that changes the deps replaces the workers.
	cfg := p.Config()
	cfg.Deps = []string{"pyrun-demo==2.0"}
	if err := p.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "a worker with the new deps", func() bool {
		res := run(t, p, supervisor.Job{Code: "import sys\ngetattr(sys.modules.get('pyrun_demo'), 'VERSION', None)"})
		return res.Value == `"2.0"`
	})

	// Deps that cannot be had keep workers from starting, and say why.
	bad := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Wheelhouse: wh, Deps: []string{"pyrun-demo==9"}})
	waitLong(t, "a start error", func() bool { return strings.Contains(bad.Stats().StartError, "pyrun-demo==9") })
}

// TestPackageCacheIsOutOfReach: a call cannot change a cached wheel or the
// lock file, and a new worker loads the package as it was.
func TestPackageCacheIsOutOfReach(t *testing.T) {
	wh := t.TempDir()
	packagestest.Demo(t, wh)
	rt := ownPackages(t)
	p := snapshotPool(t, rt, supervisor.Config{Workers: 1, Wheelhouse: wh, Isolation: supervisor.IsolationProcess})
	res := run(t, p, supervisor.Job{Code: "import pyrun_demo\npyrun_demo.VERSION"})
	wantStatus(t, res, supervisor.StatusSuccess)
	before := treeHash(t, rt.PackageDir)
	lock := filepath.Join(rt.Dir, "node_modules", "pyodide", "pyodide-lock.json")
	var wheel string
	for p := range before {
		wheel = filepath.Join(rt.PackageDir, p)
	}
	if wheel == "" {
		t.Fatal("nothing in the package cache")
	}
	code := `
import js, pyodide.ffi
out = {}
for name, path in paths.items():
    try:
        js.Deno.writeFileSync(path, pyodide.ffi.to_js(b"evil"))
        out[name] = "written"
    except Exception as e:
        out[name] = type(e).__name__
    try:
        js.Deno.removeSync(path)
        out[name + " removed"] = "yes"
    except Exception as e:
        out[name + " removed"] = type(e).__name__
# Pyodide's own copy in the worker's file system is out of reach too.
import pyrun_demo, os
try:
    with open(pyrun_demo.__file__, "w") as f:
        f.write("VERSION = 'evil'")
    out["site-packages"] = "written"
except PermissionError as e:
    out["site-packages"] = type(e).__name__
out`
	res = hostileRun(t, p, code, map[string]any{"paths": map[string]string{"wheel": wheel, "lock": lock}}, 10*time.Second)
	wantStatus(t, res, supervisor.StatusSuccess)
	if strings.Contains(res.Value, "written") || strings.Contains(res.Value, "yes") {
		t.Errorf("the call changed pyrun's files: %s", res.Value)
	}
	if after := treeHash(t, rt.PackageDir); !equalHashes(before, after) {
		t.Errorf("the package cache changed: %v -> %v", before, after)
	}
	res = run(t, p, supervisor.Job{Code: "import pyrun_demo\npyrun_demo.VERSION"})
	wantStatus(t, res, supervisor.StatusSuccess)
	if res.Value != `"2.0"` {
		t.Errorf("a new worker loads %s, want the package as it was", res.Value)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Error(err)
	}
}

func equalHashes(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDistributionPackageOffline: numpy, from the default index (the CDN),
// on a machine that cannot reach it, fails fast and clearly, and the
// worker goes on serving.
func TestDistributionPackageOffline(t *testing.T) {
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1})
	began := time.Now()
	res := run(t, p, supervisor.Job{Code: "import numpy\nnumpy.zeros(3)"})
	took := time.Since(began)
	if res.Status == supervisor.StatusSuccess { // a machine that reaches the CDN
		if strings.Join(strings.Fields(res.Value), "") != "[0.0,0.0,0.0]" {
			t.Errorf("numpy.zeros(3): %s", res.Value)
		}
		return
	}
	wantStatus(t, res, supervisor.StatusInstallError)
	if !strings.Contains(res.Error, "numpy 2.4.6") || !strings.Contains(res.Error, "cdn.jsdelivr.net") {
		t.Errorf("error %q", res.Error)
	}
	if took > 15*time.Second {
		t.Errorf("took %s to fail", took)
	}
	wantStatus(t, run(t, p, supervisor.Job{Code: "1 + 1"}), supervisor.StatusSuccess)

	none := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, Network: supervisor.NetworkNone})
	res = run(t, none, supervisor.Job{Code: "import numpy"})
	wantStatus(t, res, supervisor.StatusInstallError)
	if !strings.Contains(res.Error, "network mode is none") {
		t.Errorf("error %q", res.Error)
	}
}

// TestPackagesFromPyPI: a PEP 723 requirement neither the index nor the
// wheelhouse has comes from a JSON API like PyPI's (on loopback), with its
// dependencies, and the worker imports it.
func TestPackagesFromPyPI(t *testing.T) {
	dir := t.TempDir()
	lite := packagestest.Wheel{Name: "lite", Version: "1.0", Files: map[string]string{"lite/__init__.py": "import tinydep\nV = tinydep.V + 1\n"}}.Write(t, dir)
	dep := packagestest.Wheel{Name: "tinydep", Version: "0.3", Files: map[string]string{"tinydep.py": "V = 41\n"}}.Write(t, dir)
	srv, _ := packagestest.PyPI(t, []packagestest.Release{{Built: lite, RequiresDist: []string{"tinydep"}}, {Built: dep}})
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, PyPI: srv.URL + "/pypi/"})
	res := run(t, p, supervisor.Job{Code: "# /// script\n# dependencies = [\"lite>=1\"]\n# ///\nimport lite\nlite.V"})
	wantStatus(t, res, supervisor.StatusSuccess)
	if res.Value != "42" || strings.Join(res.Dependencies, ",") != "tinydep,lite" {
		t.Errorf("value %s, dependencies %v", res.Value, res.Dependencies)
	}
	// A plain import is not looked up on PyPI.
	res = run(t, p, supervisor.Job{Code: "import tinydep_other"})
	wantStatus(t, res, supervisor.StatusRunError)
}

// TestPackageFetchTimesOut: a call whose package download outlasts its
// time limit ends as a timeout, and the worker, which was waiting for the
// supervisor's answer, stays in step with it (or is replaced).
func TestPackageFetchTimesOut(t *testing.T) {
	idx := t.TempDir()
	built := packagestest.Demo(t, idx)
	packagestest.Index(t, idx, built[1:2], nil)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".whl") {
			select { // a download that never comes
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		http.FileServer(http.Dir(idx)).ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	p := snapshotPool(t, ownPackages(t), supervisor.Config{Workers: 1, PackageIndex: srv.URL})
	waitReady(t, p, 1)
	began := time.Now()
	res := run(t, p, supervisor.Job{Code: "print('before')\nimport pyrun_demo", Timeout: time.Second})
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the call took %s, with a 1s limit", took)
	}
	wantStatus(t, res, supervisor.StatusTimeout)
	if !strings.Contains(res.Error, "time limit of 1s") {
		t.Errorf("error %q", res.Error)
	}
	// The worker and pyrun are still in step (or the worker was replaced):
	// each call gets its own answer.
	for i := range 3 {
		res := run(t, p, supervisor.Job{Code: fmt.Sprintf("print(%d)\n%d", i, i)})
		wantStatus(t, res, supervisor.StatusSuccess)
		if res.Value != fmt.Sprint(i) || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Errorf("call %d: value %s, stdout %q", i, res.Value, res.Stdout)
		}
	}
}

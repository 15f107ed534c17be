// Package packagestest builds small Python wheels and package indexes for
// tests, so that pyrun's package handling is tested offline against files
// the tests make themselves.
//
//	whl := packagestest.Wheel{Name: "demo", Version: "1.0",
//		Files: map[string]string{"demo/__init__.py": "VERSION = '1.0'"}}.Write(t, dir)
//	packagestest.Index(t, indexDir, whl) // a pyodide-lock.json listing it
package packagestest

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Wheel describes a wheel to build: a zip with the package's files and its
// *.dist-info/{METADATA,WHEEL,RECORD}.
type Wheel struct {
	Name     string            // the distribution's name, as in METADATA
	Version  string            // its version
	Files    map[string]string // path in the wheel -> content
	Requires []string          // Requires-Dist lines (PEP 508)
	// Imports are its top-level modules, for an index's lock file; nil:
	// the first path component of each of Files.
	Imports []string
}

// Built is a wheel written to disk.
type Built struct {
	Wheel
	Path   string
	SHA256 string
}

// FileName is the wheel's PEP 427 file name.
func (w Wheel) FileName() string {
	return fmt.Sprintf("%s-%s-py3-none-any.whl", strings.ReplaceAll(w.Name, "-", "_"), w.Version)
}

// Write builds the wheel in dir.
func (w Wheel) Write(t testing.TB, dir string) Built {
	t.Helper()
	p := filepath.Join(dir, w.FileName())
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	info := strings.ReplaceAll(w.Name, "-", "_") + "-" + w.Version + ".dist-info"
	meta := "Metadata-Version: 2.1\nName: " + w.Name + "\nVersion: " + w.Version + "\n"
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files := map[string]string{
		info + "/METADATA": meta,
		info + "/WHEEL":    "Wheel-Version: 1.0\nGenerator: packagestest\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for k, v := range w.Files {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	slices.Sort(names)
	var record strings.Builder
	for _, name := range names {
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString(info + "/RECORD,,\n")
	files[info+"/RECORD"] = record.String()
	names = append(names, info+"/RECORD")
	for _, name := range names {
		fw, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return Built{Wheel: w, Path: p, SHA256: hex.EncodeToString(sum[:])}
}

// Index writes dir/pyodide-lock.json listing the wheels, which must be in
// dir, as the Pyodide distribution's lock file does; depends lists each
// wheel's dependencies by name (the lock file's "depends").
func Index(t testing.TB, dir string, wheels []Built, depends map[string][]string) {
	t.Helper()
	pkgs := map[string]any{}
	for _, w := range wheels {
		imports := w.Imports
		if imports == nil {
			seen := map[string]bool{}
			for p := range w.Files {
				top, _, _ := strings.Cut(p, "/")
				top = strings.TrimSuffix(top, ".py")
				if !seen[top] {
					seen[top] = true
					imports = append(imports, top)
				}
			}
			slices.Sort(imports)
		}
		deps := depends[w.Name]
		if deps == nil {
			deps = []string{}
		}
		pkgs[strings.ToLower(w.Name)] = map[string]any{
			"name": w.Name, "version": w.Version, "file_name": filepath.Base(w.Path),
			"install_dir": "site", "sha256": w.SHA256, "package_type": "package",
			"imports": imports, "depends": deps, "unvendored_tests": false,
		}
	}
	lock := map[string]any{
		"info":     map[string]any{"arch": "wasm32", "platform": "emscripten_5_0_3", "version": "314.0.7", "python": "3.14.2"},
		"packages": pkgs,
	}
	b, err := json.MarshalIndent(lock, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pyodide-lock.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Release is one file of a project on a fake PyPI.
type Release struct {
	Built
	RequiresPython string
	RequiresDist   []string // of the release's version
	Yanked         bool
	Sdist          bool // listed as a source archive, not a wheel
}

// PyPI serves the releases on loopback through a JSON API like PyPI's
// (/pypi/<project>/json, /pypi/<project>/<version>/json, and the files),
// at srv.URL + "/pypi/". hits counts the requests for a path.
func PyPI(t testing.TB, releases []Release) (srv *httptest.Server, hits func(path string) int) {
	t.Helper()
	byProject := map[string][]Release{}
	for _, r := range releases {
		name := strings.ToLower(r.Name)
		byProject[name] = append(byProject[name], r)
	}
	c := &counter{n: map[string]int{}}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c.add(req.URL.Path)
		if f, ok := strings.CutPrefix(req.URL.Path, "/files/"); ok {
			for _, r := range releases {
				if r.Path != "" && filepath.Base(r.Path) == f {
					http.ServeFile(w, req, r.Path)
					return
				}
			}
			http.NotFound(w, req)
			return
		}
		parts := strings.Split(strings.Trim(strings.TrimPrefix(req.URL.Path, "/pypi/"), "/"), "/")
		rels, ok := byProject[parts[0]]
		if !ok || parts[len(parts)-1] != "json" || len(parts) > 3 {
			http.NotFound(w, req)
			return
		}
		version := ""
		if len(parts) == 3 {
			version = parts[1]
		}
		files := map[string][]map[string]any{}
		var requires []string
		for _, r := range rels {
			if version != "" && r.Version != version {
				continue
			}
			if version != "" {
				requires = r.RequiresDist
			}
			f := map[string]any{"packagetype": "bdist_wheel", "yanked": r.Yanked, "requires_python": r.RequiresPython}
			if r.Sdist {
				f["packagetype"], f["filename"] = "sdist", r.Name+"-"+r.Version+".tar.gz"
				f["digests"] = map[string]string{"sha256": strings.Repeat("0", 64)}
			} else {
				f["filename"], f["digests"] = filepath.Base(r.Path), map[string]string{"sha256": r.SHA256}
			}
			f["url"] = srv.URL + "/files/" + f["filename"].(string)
			files[r.Version] = append(files[r.Version], f)
		}
		if version != "" && len(files) == 0 {
			http.NotFound(w, req)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"info":     map[string]any{"name": rels[0].Name, "requires_dist": requires},
			"releases": files,
		})
	}))
	t.Cleanup(srv.Close)
	return srv, c.get
}

// Demo writes the wheels pyrun's package tests share into dir: pyrun-demo
// 1.0 and 2.0 (module pyrun_demo, VERSION), and the chain app -> mid ->
// base (each module's NAME names the chain), whose Requires-Dist also holds
// a dependency for Windows only and one of an extra, neither of which a
// worker installs.
func Demo(t testing.TB, dir string) []Built {
	t.Helper()
	var out []Built
	for _, w := range []Wheel{
		{Name: "pyrun-demo", Version: "1.0", Files: map[string]string{"pyrun_demo/__init__.py": "VERSION = '1.0'\n"}},
		{Name: "pyrun-demo", Version: "2.0", Files: map[string]string{"pyrun_demo/__init__.py": "VERSION = '2.0'\n"}},
		{Name: "app", Version: "0.1", Files: map[string]string{"app.py": "import mid\nNAME = 'app+' + mid.NAME\n"},
			Requires: []string{"mid>=1.0", "colorama; sys_platform == 'win32'", "extras-only; extra == 'dev'"}},
		{Name: "mid", Version: "1.2", Files: map[string]string{"mid/__init__.py": "import base\nNAME = 'mid+' + base.NAME\n"},
			Requires: []string{"base (>=0.5)"}},
		{Name: "base", Version: "0.5", Files: map[string]string{"base/__init__.py": "NAME = 'base'\n"}},
	} {
		out = append(out, w.Write(t, dir))
	}
	return out
}

// Serve serves dir on loopback HTTP, as a package index or a mirror does;
// hits counts the requests for a path.
func Serve(t testing.TB, dir string) (srv *httptest.Server, hits func(path string) int) {
	t.Helper()
	c := &counter{n: map[string]int{}}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.add(r.URL.Path)
		http.FileServer(http.Dir(dir)).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, c.get
}

// counter counts requests by path; safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[path]++
}

func (c *counter) get(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

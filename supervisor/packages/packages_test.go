package packages_test

import (
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor/packages"
	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

func newResolver(t *testing.T, opt packages.Options) *packages.Resolver {
	t.Helper()
	if opt.CacheDir == "" {
		opt.CacheDir = t.TempDir()
	}
	if opt.Index == "" {
		// An empty index directory: only the wheelhouse counts.
		opt.Index = t.TempDir()
		packagestest.Index(t, opt.Index, nil, nil)
	}
	r, err := packages.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(files []packages.File) string {
	var s []string
	for _, f := range files {
		s = append(s, f.Name+"=="+f.Version)
	}
	return strings.Join(s, " ")
}

func TestResolveFromTheWheelhouse(t *testing.T) {
	wh := t.TempDir()
	packagestest.Demo(t, wh)
	r := newResolver(t, packages.Options{Wheelhouse: wh})
	for _, tc := range []struct {
		name string
		req  packages.Request
		want string // the files, or the error's words
		err  bool
	}{
		{"an import takes the newest", packages.Request{Imports: []string{"pyrun_demo"}}, "pyrun-demo==2.0", false},
		{"a pin takes the older", packages.Request{Requires: []string{"pyrun-demo==1.0"}}, "pyrun-demo==1.0", false},
		{"a range", packages.Request{Requires: []string{"Pyrun_Demo>=1,<2"}}, "pyrun-demo==1.0", false},
		{"dependencies of dependencies come first; markers and extras hold", packages.Request{Imports: []string{"app"}}, "base==0.5 mid==1.2 app==0.1", false},
		{"loaded packages are not loaded again", packages.Request{Imports: []string{"app"}, Loaded: map[string]string{"base": "0.5"}}, "mid==1.2 app==0.1", false},
		{"imports no package provides are left alone", packages.Request{Imports: []string{"mymodule", "json"}}, "", false},
		{"an unsatisfiable pin", packages.Request{Requires: []string{"pyrun-demo==3.0"}}, "pyrun-demo==3.0 (needed by the script) cannot be satisfied: there is 1.0 (the wheelhouse), 2.0 (the wheelhouse)", true},
		{"an unknown package", packages.Request{Requires: []string{"no-such-package"}}, "no-such-package (needed by the script): no such package in the package index or the wheelhouse", true},
		{"a conflict between requirements", packages.Request{Requires: []string{"pyrun-demo==1.0", "pyrun-demo>=2"}}, "conflicts with pyrun-demo 1.0", true},
		{"requires-python", packages.Request{Requires: []string{}, RequiresPython: "<3.10"}, "requires Python <3.10; the workers run Python 3.14.2", true},
		{"a direct reference", packages.Request{Requires: []string{"pkg @ https://example.com/pkg.whl"}}, "direct references", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := r.Resolve(t.Context(), tc.req)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(files); got != tc.want {
				t.Errorf("files %q, want %q", got, tc.want)
			}
		})
	}
	_, err := r.Resolve(t.Context(), packages.Request{Requires: []string{"pyrun-demo==1.0"}, Loaded: map[string]string{"pyrun-demo": "2.0"}})
	if !errors.Is(err, packages.ErrLoadedConflict) {
		t.Errorf("a pin against a loaded version: %v, want ErrLoadedConflict", err)
	}
}

func TestWheelhouseIsReadAgainWhenItChanges(t *testing.T) {
	wh := t.TempDir()
	r := newResolver(t, packages.Options{Wheelhouse: wh})
	if files, err := r.Resolve(t.Context(), packages.Request{Imports: []string{"pyrun_demo"}}); err != nil || len(files) != 0 {
		t.Fatalf("empty wheelhouse: %v %v", files, err)
	}
	packagestest.Demo(t, wh)
	files, err := r.Resolve(t.Context(), packages.Request{Imports: []string{"pyrun_demo"}})
	if err != nil || names(files) != "pyrun-demo==2.0" {
		t.Fatalf("after adding wheels: %q %v", names(files), err)
	}
}

// TestCache checks that files land in the cache read-only and checked, that
// a second resolver on the same cache downloads nothing, and that a cached
// file that was changed is fetched again.
func TestCache(t *testing.T) {
	idx := t.TempDir()
	built := packagestest.Demo(t, idx)
	packagestest.Index(t, idx, built[1:], map[string][]string{"app": {"mid"}, "mid": {"base"}})
	srv, hits := packagestest.Serve(t, idx)
	cache := t.TempDir()
	resolve := func() []packages.File {
		t.Helper()
		r := newResolver(t, packages.Options{Index: srv.URL, CacheDir: cache})
		files, err := r.Resolve(t.Context(), packages.Request{Imports: []string{"app"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := names(files); got != "base==0.5 mid==1.2 app==0.1" {
			t.Fatalf("files %q", got)
		}
		return files
	}
	files := resolve()
	for _, f := range files {
		st, err := os.Stat(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(f.Path, cache) || st.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s: not a read-only file in the cache (%v)", f.Path, st.Mode())
		}
	}
	resolve()
	for _, f := range files {
		if n := hits("/" + filepath.Base(f.Path)); n != 1 {
			t.Errorf("%s fetched %d times, want once", filepath.Base(f.Path), n)
		}
	}

	// A file changed behind pyrun's back is not used: it is fetched again.
	if err := os.Chmod(files[0].Path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0].Path, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := resolve()
	if b, _ := os.ReadFile(again[0].Path); string(b) == "tampered" {
		t.Error("a tampered cached file was used")
	}
	if n := hits("/" + filepath.Base(files[0].Path)); n != 2 {
		t.Errorf("tampered file fetched %d times in all, want 2", n)
	}
}

func TestFetchFailures(t *testing.T) {
	idx := t.TempDir()
	built := packagestest.Demo(t, idx)
	bad := built[4]
	bad.SHA256 = strings.Repeat("0", 64)
	packagestest.Index(t, idx, []packagestest.Built{bad}, nil)
	srv, _ := packagestest.Serve(t, idx)

	r := newResolver(t, packages.Options{Index: srv.URL})
	_, err := r.Resolve(t.Context(), packages.Request{Imports: []string{"base"}})
	if err == nil || !strings.Contains(err.Error(), "refusing it") {
		t.Errorf("a file whose checksum does not match: %v", err)
	}

	r = newResolver(t, packages.Options{Index: srv.URL, Offline: true})
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"base"}})
	if err == nil || !strings.Contains(err.Error(), "network mode is none") {
		t.Errorf("a URL index with the network off: %v", err)
	}

	// A local index works with the network off.
	packagestest.Index(t, idx, built[4:], nil)
	r = newResolver(t, packages.Options{Index: idx, Offline: true})
	if files, err := r.Resolve(t.Context(), packages.Request{Imports: []string{"base"}}); err != nil || names(files) != "base==0.5" {
		t.Errorf("a local index offline: %q %v", names(files), err)
	}

	// A lock file whose entries would lead out of the cache is refused.
	evil := t.TempDir()
	lock := `{"info": {"python": "3.14.2"}, "packages": {
		"up": {"name": "up", "version": "1", "file_name": "..", "sha256": "` + strings.Repeat("a", 64) + `", "imports": ["up"]},
		"odd": {"name": "odd", "version": "1", "file_name": "odd.whl", "sha256": "` + strings.Repeat("Z", 64) + `", "imports": ["odd"]}}}`
	if err := os.WriteFile(filepath.Join(evil, "pyodide-lock.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	r = newResolver(t, packages.Options{Index: evil})
	for imp, want := range map[string]string{"up": "is not a file name", "odd": "no SHA-256"} {
		if _, err := r.Resolve(t.Context(), packages.Request{Imports: []string{imp}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("import %s from a bad lock file: %v, want %q", imp, err, want)
		}
	}

	// An index that answers badly is not an unreachable one.
	r = newResolver(t, packages.Options{Index: srv.URL + "/nowhere/"})
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"base"}})
	if err == nil || !strings.Contains(err.Error(), "cannot be read") || !strings.Contains(err.Error(), "404") || errors.Is(err, packages.ErrUnreachable) {
		t.Errorf("an index without a lock file: %v", err)
	}
}

// closedPort is a loopback URL nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/"
}

// TestUnreachableSources: a package source that does not answer (this
// machine offline) is named, with what the call asked for and the ways out,
// not left as a dial error about a dependency the call never named.
func TestUnreachableSources(t *testing.T) {
	wantWords := func(t *testing.T, what string, err error, words ...string) {
		t.Helper()
		if err == nil || !errors.Is(err, packages.ErrUnreachable) {
			t.Fatalf("%s: %v, want ErrUnreachable", what, err)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
		if strings.Contains(err.Error(), "dial tcp") {
			t.Errorf("%s: %q quotes the dialer", what, err)
		}
	}
	offIndex := []string{"--package-index directory", "--wheelhouse", "offline"}

	// The lock file is at hand and its files are not, as with the default
	// index (the runtime's lock file, the CDN's files) on a machine offline.
	idx := t.TempDir()
	built := packagestest.Demo(t, idx)
	packagestest.Index(t, idx, built[1:], map[string][]string{"app": {"mid"}, "mid": {"base"}})
	down := closedPort(t)
	lockPath := filepath.Join(idx, "pyodide-lock.json")
	b, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range built[1:] {
		name := filepath.Base(w.Path)
		b = []byte(strings.ReplaceAll(string(b), `"`+name+`"`, `"`+down+name+`"`))
	}
	if err := os.WriteFile(lockPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := newResolver(t, packages.Options{Index: idx})
	_, err = r.Resolve(t.Context(), packages.Request{Imports: []string{"app"}})
	wantWords(t, "a dependency's file", err, append(offIndex, "base 0.5 (needed by mid 1.2, for import app)",
		"the package index "+down, "connect to "+strings.TrimSuffix(strings.TrimPrefix(down, "http://"), "/")+": connection refused")...)
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"base"}})
	wantWords(t, "a requirement's file", err, append(offIndex, "base 0.5 (for the script)")...)

	// The index itself does not answer.
	r = newResolver(t, packages.Options{Index: down})
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"base"}})
	wantWords(t, "an index URL", err, append(offIndex, "base (needed by the script)", "the package index "+down+" cannot be reached")...)

	// PyPI does not answer.
	r = newResolver(t, packages.Options{PyPI: down + "pypi/"})
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"lite"}})
	wantWords(t, "PyPI", err, "lite (needed by the script)", "PyPI "+down+"pypi/ cannot be reached", "--wheelhouse", "--pypi")
}

func TestParseRequirement(t *testing.T) {
	for in, want := range map[string]string{
		"numpy":                        "numpy",
		"Foo_Bar.baz >= 1.0, < 2":      "foo-bar-baz>= 1.0, < 2",
		"requests[socks]==2.31":        "requests==2.31",
		"attrs (>=23)":                 "attrs>=23",
		"tomli; python_version<'3.11'": "tomli",
	} {
		r, err := packages.ParseRequirement(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("%q: %q, want %q", in, r.String(), want)
		}
	}
	for _, bad := range []string{"", "==1.0", "foo >>= 1", "foo; os_name =", "foo; unknown_var == 'x'"} {
		if _, err := packages.ParseRequirement(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// fakePyPI serves lite and tinydep on a JSON API like PyPI's: lite 1.0
// (needs tinydep>=0.2), 2.0 for a newer Python, 3.0 yanked, 4.0 an sdist.
func fakePyPI(t *testing.T) (*httptest.Server, func(path string) int) {
	t.Helper()
	dir := t.TempDir()
	lite := func(v string) packagestest.Built {
		return packagestest.Wheel{Name: "lite", Version: v, Files: map[string]string{"lite/__init__.py": "V = " + v + "\n"}}.Write(t, dir)
	}
	dep := packagestest.Wheel{Name: "tinydep", Version: "0.3", Files: map[string]string{"tinydep.py": ""}}.Write(t, dir)
	return packagestest.PyPI(t, []packagestest.Release{
		{Built: lite("1.0"), RequiresPython: ">=3.8", RequiresDist: []string{"tinydep>=0.2"}},
		{Built: lite("2.0"), RequiresPython: ">=3.99"},
		{Built: lite("3.0"), Yanked: true},
		{Built: packagestest.Built{Wheel: packagestest.Wheel{Name: "lite", Version: "4.0"}}, Sdist: true},
		{Built: dep},
	})
}

func TestResolveFromPyPI(t *testing.T) {
	srv, hits := fakePyPI(t)
	r := newResolver(t, packages.Options{PyPI: srv.URL + "/pypi/"})
	files, err := r.Resolve(t.Context(), packages.Request{Requires: []string{"lite"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(files); got != "tinydep==0.3 lite==1.0" {
		t.Errorf("files %q, want tinydep==0.3 lite==1.0 (2.0 needs another Python, 3.0 is yanked, 4.0 has no wheel)", got)
	}
	if len(files) == 2 && strings.Join(files[1].Imports, ",") != "lite" {
		t.Errorf("imports of lite %v, read from its wheel", files[1].Imports)
	}
	_, err = r.Resolve(t.Context(), packages.Request{Requires: []string{"nowhere"}})
	if err == nil || !strings.Contains(err.Error(), "no such package in the package index, the wheelhouse or "+srv.URL) {
		t.Errorf("a project PyPI does not have: %v", err)
	}
	// Listings are kept: a second request asks PyPI nothing about lite.
	if _, err := r.Resolve(t.Context(), packages.Request{Requires: []string{"lite==1.0"}}); err != nil {
		t.Fatal(err)
	}
	if n := hits("/pypi/lite/json"); n != 1 {
		t.Errorf("PyPI asked %d times for lite's listing, want once", n)
	}
	// Offline, PyPI is never asked.
	off := newResolver(t, packages.Options{PyPI: srv.URL + "/pypi/", Offline: true})
	if _, err := off.Resolve(t.Context(), packages.Request{Requires: []string{"lite"}}); err == nil || !strings.Contains(err.Error(), "no such package in the package index or the wheelhouse") {
		t.Errorf("offline: %v", err)
	}
}

// TestReach: pyrun warmup's check of the sources a Resolver downloads from.
func TestReach(t *testing.T) {
	idx := t.TempDir()
	packagestest.Index(t, idx, nil, nil)
	srv, hits := packagestest.Serve(t, idx)
	pypi, _ := fakePyPI(t)
	down := closedPort(t)
	reach := func(opt packages.Options) []packages.Source {
		t.Helper()
		return newResolver(t, opt).Reach(t.Context())
	}

	got := reach(packages.Options{Index: srv.URL, PyPI: pypi.URL + "/pypi/"})
	if len(got) != 2 || got[0] != (packages.Source{What: "the package index " + srv.URL + "/"}) || got[1] != (packages.Source{What: "PyPI " + pypi.URL + "/pypi/", PyPI: true}) {
		t.Errorf("sources that answer: %+v", got)
	}

	got = reach(packages.Options{Index: down, PyPI: down + "pypi/"})
	if len(got) != 2 || !errors.Is(got[0].Err, packages.ErrUnreachable) || !errors.Is(got[1].Err, packages.ErrUnreachable) || got[0].PyPI || !got[1].PyPI ||
		!strings.Contains(got[0].Err.Error(), "the package index "+down+" cannot be reached") || !strings.Contains(got[1].Err.Error(), "PyPI "+down+"pypi/ cannot be reached") {
		t.Errorf("sources that do not answer: %+v", got)
	}

	// An index that answers without its lock file is not unreachable.
	if got = reach(packages.Options{Index: srv.URL + "/elsewhere/"}); len(got) != 1 || got[0].Err == nil || errors.Is(got[0].Err, packages.ErrUnreachable) || !strings.Contains(got[0].Err.Error(), "404") {
		t.Errorf("an index without a lock file: %+v", got)
	}

	// Offline, and for a directory index, nothing is asked.
	before := hits("/pyodide-lock.json")
	if got = reach(packages.Options{Index: srv.URL, PyPI: pypi.URL + "/pypi/", Offline: true}); len(got) != 0 || hits("/pyodide-lock.json") != before {
		t.Errorf("offline: %+v", got)
	}
	if got = reach(packages.Options{Index: idx}); len(got) != 0 {
		t.Errorf("a directory index: %+v", got)
	}
}

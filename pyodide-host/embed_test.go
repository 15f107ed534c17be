package pyodidehost_test

import (
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	pyodidehost "github.com/pyrun/pyrun/pyodide-host"
	"github.com/pyrun/pyrun/supervisor"
)

// These tests need only the files (go test -short runs them): what the
// runtime folder receives must hold every module the programs load, and
// the Python engine's permissions must let its Worker thread load them.

// loads matches an import or export that loads a relative module at run
// time; "import type" is erased and loads nothing.
var loads = regexp.MustCompile(`(?m)^(?:import|export) (?:[^;]*? from )?"(\.{1,2}/[^"]+)";`)

// imports are the modules file loads, as paths in Files.
func imports(t *testing.T, file string) []string {
	t.Helper()
	b, err := fs.ReadFile(pyodidehost.Files, file)
	if err != nil {
		t.Fatalf("%s is not embedded: %v", file, err)
	}
	var out []string
	for _, m := range loads.FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[0], "import type ") || strings.HasPrefix(m[0], "export type ") {
			continue
		}
		p := path.Join(path.Dir(file), m[1])
		if strings.HasPrefix(p, "node_modules/") || strings.HasPrefix(p, "../") {
			continue // npm installs these in the runtime folder
		}
		out = append(out, p)
	}
	return out
}

// graph is every embedded module entry loads, itself included.
func graph(t *testing.T, entry string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		for _, p := range imports(t, f) {
			walk(p)
		}
	}
	walk(entry)
	var out []string
	for f := range seen {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

func TestEmbeddedProgramsAreWhole(t *testing.T) {
	for _, e := range supervisor.Engines() {
		if got := graph(t, e.Program()); len(got) < 2 {
			t.Errorf("%s: %s loads %v, want its modules", e.Name(), e.Program(), got)
		}
	}
}

// TestPythonWorkerThreadMayLoadItsModules: main.ts's own imports are part
// of the program Deno starts and need no permission, but worker.ts runs in
// a Worker, whose modules Deno loads only with read permission.
func TestPythonWorkerThreadMayLoadItsModules(t *testing.T) {
	var py supervisor.Engine
	for _, e := range supervisor.Engines() {
		if e.Name() == "python" {
			py = e
		}
	}
	if py == nil {
		t.Fatal("no python engine")
	}
	rt := &supervisor.Runtime{Dir: "/rt"}
	perms, err := py.Permissions(rt)
	if err != nil {
		t.Fatal(err)
	}
	readable := func(p string) bool {
		for _, r := range perms.Read {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	for _, f := range graph(t, "worker.ts") {
		if !readable(path.Join(rt.Dir, f)) {
			t.Errorf("worker.ts loads %s, which the Python engine may not read (%v)", f, perms.Read)
		}
	}
	// And the helper's modules, which worker.ts reads into Pyodide: every
	// one of python/, as worker.ts names them.
	entries, err := fs.ReadDir(pyodidehost.Files, "python")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
		if p := path.Join(rt.Dir, "python", e.Name()); !readable(p) {
			t.Errorf("the Python engine may not read %s", p)
		}
	}
	src, err := fs.ReadFile(pyodidehost.Files, "worker.ts")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`(?s)const PYTHON_MODULES = \[(.*?)\];`).FindSubmatch(src)
	if list == nil {
		t.Fatal("worker.ts has no PYTHON_MODULES")
	}
	var named []string
	for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(list[1], -1) {
		named = append(named, string(m[1]))
	}
	slices.Sort(named)
	if !slices.Equal(named, files) {
		t.Errorf("worker.ts loads %v into Pyodide, python/ holds %v", named, files)
	}
}

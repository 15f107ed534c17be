package supervisor_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

func TestEnginesListPythonFirstAndNameEachOnce(t *testing.T) {
	engines := supervisor.Engines()
	if len(engines) == 0 || engines[0].Name() != "python" {
		t.Fatalf("Engines() = %v, want python first", engines)
	}
	seen := map[string]bool{}
	for _, e := range engines {
		if seen[e.Name()] {
			t.Errorf("engine %q listed twice", e.Name())
		}
		seen[e.Name()] = true
		if e.DefaultMemoryLimit() < 128<<20 {
			t.Errorf("engine %q: default memory limit %d is below what any engine idles at", e.Name(), e.DefaultMemoryLimit())
		}
	}
}

// Every engine's worker gets only read permissions, its own flags and the
// pool's network: never run, write, ffi, sys or the host's whole
// environment, and its program is in the runtime folder it may read.
func TestEngineArgsGrantNoRunWriteOrBroadEnv(t *testing.T) {
	rt := testruntime.Get(t)
	for _, e := range supervisor.Engines() {
		args, err := supervisor.EngineWorkerArgs(rt, e, supervisor.Config{Network: supervisor.NetworkNone})
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		program := args[len(args)-2]
		if want := filepath.Join(rt.Dir, filepath.FromSlash(e.Program())); program != want {
			t.Errorf("%s: program %q, want %q", e.Name(), program, want)
		}
		if _, err := os.Stat(program); err != nil {
			t.Errorf("%s: program not in the runtime: %v", e.Name(), err)
		}
		var hc map[string]any
		if err := json.Unmarshal([]byte(args[len(args)-1]), &hc); err != nil {
			t.Errorf("%s: host config %q: %v", e.Name(), args[len(args)-1], err)
		}
		for _, a := range args[:len(args)-2] {
			for _, bad := range []string{"--allow-run", "--allow-write", "--allow-ffi", "--allow-sys", "--allow-all", "-A"} {
				if a == bad || strings.HasPrefix(a, bad+"=") {
					t.Errorf("%s: worker granted %s", e.Name(), a)
				}
			}
			if a == "--allow-env" || a == "--allow-net" {
				t.Errorf("%s: worker granted %s with network none", e.Name(), a)
			}
		}
		if !slices.Contains(args, "--no-prompt") || !slices.Contains(args, "--cached-only") {
			t.Errorf("%s: args %q lack --no-prompt or --cached-only", e.Name(), args)
		}
	}
}

func TestPythonWorkerSaysItsEngineAndVersions(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1})
	if p.Engine().Name() != "python" {
		t.Fatalf("NewPool's engine = %q, want python", p.Engine().Name())
	}
	res := run(t, p, supervisor.Job{Code: "import sys; sys.version.split()[0]"})
	rt := testruntime.Get(t)
	if res.Value != `"`+rt.Python+`"` {
		t.Fatalf("Python version %s, want %q", res.Value, rt.Python)
	}
	v := supervisor.Python.Versions(rt)
	if v["python"] != rt.Python || v["pyodide"] != rt.Pyodide || rt.Pyodide == "" {
		t.Errorf("Python.Versions = %v, want python %s and pyodide %s", v, rt.Python, rt.Pyodide)
	}
	if got := p.Config().MemoryLimit; got != supervisor.Python.DefaultMemoryLimit() {
		t.Errorf("memory limit %d, want Python's default %d", got, supervisor.Python.DefaultMemoryLimit())
	}
}

// A call with no code is a call: the worker gets "code": "" and answers
// success with no value (it once got no code field, and the call crashed).
func TestEmptyCodeRuns(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1})
	res := run(t, p, supervisor.Job{Code: ""})
	if res.Status != supervisor.StatusSuccess || res.Value != "" || res.Stdout != "" {
		t.Errorf("empty code: %s, value %q, error %q", res.Status, res.Value, res.Error)
	}
	if s := p.Stats(); s.Counts.Restarts[supervisor.RestartProtocol]+s.Counts.Restarts[supervisor.RestartCrash] != 0 {
		t.Errorf("an empty call retired its worker: %v", s.Counts.Restarts)
	}
}

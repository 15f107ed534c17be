package lang_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// Every language is registered once, with what its parts need: Python
// first (the default), each ID its engine's name, and its tool, flags and
// engine its own. The supervisor's engines are exactly the languages'
// engines, so that neither list can gain one the other lacks.
func TestRegistrations(t *testing.T) {
	all := lang.All()
	if len(all) != lang.Count || all[0].ID != "python" {
		t.Fatalf("All() = %d languages, want %d with python first", len(all), lang.Count)
	}
	var engines []string
	seen := map[string]string{}
	once := func(what, v, id string) {
		if other, ok := seen[what+" "+v]; ok {
			t.Errorf("%s %q of %s is %s's too", what, v, id, other)
		}
		seen[what+" "+v] = id
	}
	for i, l := range all {
		if l.ID == "" || l.ID != strings.ToLower(l.ID) || l.Title == "" || (l.Article != "a" && l.Article != "an") {
			t.Errorf("%+v: an ID in lower case, a Title and an article, please", l)
		}
		if l.Engine == nil || l.Engine.Name() != l.ID {
			t.Errorf("%s: engine %v, want one named %s", l.ID, l.Engine, l.ID)
			continue
		}
		if got := lang.Index(l); got != i {
			t.Errorf("Index(%s) = %d, want %d", l.ID, got, i)
		}
		if got, err := lang.Named(l.ID); err != nil || got.ID != l.ID {
			t.Errorf("Named(%s) = %v, %v", l.ID, got.ID, err)
		}
		tool := l.Tool(nil)
		once("tool", tool.Tool, l.ID)
		once("flag", l.WorkersFlag(), l.ID)
		once("flag", l.MemoryFlag(), l.ID)
		once("flag prefix", l.FlagPrefix, l.ID)
		if l.DefaultWorkers() < 1 || l.Engine.DefaultMemoryLimit() < 128<<20 {
			t.Errorf("%s: default pool of %d workers of %d bytes", l.ID, l.DefaultWorkers(), l.Engine.DefaultMemoryLimit())
		}
		engines = append(engines, l.ID)
	}
	var built []string
	for _, e := range supervisor.Engines() {
		built = append(built, e.Name())
	}
	if !slices.Equal(built, engines) {
		t.Errorf("supervisor's engines %v, languages' %v", built, engines)
	}
}

// The tools are named from the IDs as clients have always known them, and
// Python's is the mcp package's default tool, run_python_code.
func TestTools(t *testing.T) {
	for l, want := range map[*lang.Language][2]string{
		&lang.Python: {"run_python_code", "python_code"}, &lang.R: {"run_r_code", "r_code"},
		&lang.JavaScript: {"run_javascript_code", "javascript_code"},
	} {
		if tool := l.Tool(nil); tool.Tool != want[0] || tool.CodeArg != want[1] {
			t.Errorf("%s: tool %s taking %s, want %s taking %s", l.ID, tool.Tool, tool.CodeArg, want[0], want[1])
		}
	}
	py, def := lang.Python.Tool(nil), mcp.Python
	if py.Name != def.Name || py.Title != def.Title || py.Article != def.Article || py.Tool != def.Tool ||
		py.CodeArg != def.CodeArg || py.LeavesRunning != def.LeavesRunning ||
		py.Globals != def.Globals || py.CodeMode != def.CodeMode || py.Network != def.Network {
		t.Errorf("lang.Python's tool %+v is not mcp.Python %+v", py, def)
	}
	// What a tool takes follows its engine: only Python's binds globals,
	// calls code mode's tools and reaches the network.
	for _, l := range []lang.Language{lang.R, lang.JavaScript} {
		if tool := l.Tool(nil); tool.Globals || tool.CodeMode || tool.Network {
			t.Errorf("%s's tool takes globals, code mode or the network: %+v", l.ID, tool)
		}
	}
	if lang.R.WorkersFlag() != "r-workers" || lang.JavaScript.MemoryFlag() != "js-memory-limit" || lang.Python.WorkersFlag() != "workers" {
		t.Errorf("flags %s, %s, %s", lang.R.WorkersFlag(), lang.JavaScript.MemoryFlag(), lang.Python.WorkersFlag())
	}
}

func TestNamedRefusesWhatIsNotServed(t *testing.T) {
	for id, want := range map[string]string{
		"julia": "no WebAssembly build",
		"cobol": `unknown language "cobol": this pyrun runs python, r, javascript`,
	} {
		if _, err := lang.Named(id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Named(%s) = %v, want an error saying %q", id, err, want)
		}
	}
}

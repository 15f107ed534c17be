// Package lang registers each language pyrun serves once. A Language names
// it and carries its two parts: its engine, the supervisor's (what its
// workers run and may do), and what its MCP tool says of it, the front
// end's. From it pyrun makes the language's pool, its tool, its flags and
// the words of its messages ("an R session"). The supervisor knows nothing
// of MCP and mcp nothing of processes; this package is where the two parts
// of a language meet, and cmd/pyrun wires the daemon from it.
//
//	for _, l := range lang.All() {
//		pool, err := supervisor.NewEnginePool(rt, l.Engine, cfg, log)
//		tool := l.Tool(l.Engine.Versions(rt)) // for mcp.Options.Languages
//	}
//
// A new language is its Language in languages.go; its engine,
// supervisor/engine_<name>.go, listed in the supervisor's engines, with
// its worker program under pyodide-host/; and, when the generic tool
// description is not enough, a Describe function in
// mcp/language_<name>.go.
package lang

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// Language is one language pyrun serves. Its fields are set once, here.
type Language struct {
	// ID names the language everywhere: --languages, Job.Language, the
	// engine's name, the language label of metrics. Its tool is
	// run_<ID>_code and takes its code in <ID>_code.
	ID string
	// Title is how prose names it ("R"), and Article the article before
	// it ("an": "an R session").
	Title, Article string
	// FlagPrefix begins the flags of its pool: "r" makes --r-workers and
	// --r-memory-limit; "" makes --workers and --memory-limit (Python's,
	// the first language's).
	FlagPrefix string
	// Workers is its pool's default size; 0: supervisor.DefaultWorkers().
	Workers int
	// Engine is what its workers run and may do (supervisor). Its Name
	// is ID, and its DefaultMemoryLimit the default of --<prefix>memory-limit.
	Engine supervisor.Engine
	// Describe writes its tool's description; nil: mcp's generic one.
	Describe func(mcp.Language, mcp.Options) string
	// LeavesRunning says what a call's code can leave running between a
	// session's calls ("a timer, a promise"), for the tool description;
	// "": nothing.
	LeavesRunning string
	// Runtime names what its engine runs ("Pyodide"), for pyrun warmup's
	// step that looks for its files (Engine.Files).
	Runtime string
	// SelfTest is the code pyrun warmup has a worker of it run.
	SelfTest SelfTest
}

// SelfTest is pyrun warmup's check of a language's workers, as code of the
// language: a call that prints and returns a value, one that tries to read
// a host file, and a loop that only a time limit ends.
type SelfTest struct {
	// Hello prints HelloStdout and returns HelloValue (a result's Value).
	Hello, HelloStdout, HelloValue string
	// ReadsHost returns true if it read /etc/passwd of the host, else false.
	ReadsHost string
	// Loop runs until it is stopped.
	Loop string
}

// Count is how many languages there are, for tables of them.
const Count = len(registered)

// All lists the languages, in order.
func All() []Language { return slices.Clone(registered[:]) }

// Index is l's place in All.
func Index(l Language) int {
	return slices.IndexFunc(registered[:], func(r Language) bool { return r.ID == l.ID })
}

// IDs are the languages' IDs, in order.
func IDs() []string {
	ids := make([]string, len(registered))
	for i, l := range registered {
		ids[i] = l.ID
	}
	return ids
}

// unservable are languages pyrun is asked for that it cannot run, and why.
var unservable = map[string]string{
	"julia": "Julia has no WebAssembly build to run in a sandbox",
}

// Named is the language of an ID, or an error naming the ones there are.
func Named(id string) (Language, error) {
	for _, l := range registered {
		if l.ID == id {
			return l, nil
		}
	}
	if why, ok := unservable[id]; ok {
		return Language{}, fmt.Errorf("%s cannot be served: %s", id, why)
	}
	return Language{}, fmt.Errorf("unknown language %q: this pyrun runs %s", id, strings.Join(IDs(), ", "))
}

// Tool is the language's MCP tool, telling the model that it runs
// versions ({"r": "4.6.0", "webr": "0.6.0"}). What the tool takes follows
// the engine: global_variables where calls may bind names, code mode's
// tools where they may make host tool calls, and the network where its
// workers get one.
func (l Language) Tool(versions map[string]string) mcp.Language {
	f := l.Engine.Features()
	return mcp.Language{
		Name: l.ID, Title: l.Title, Article: l.Article,
		Tool: "run_" + l.ID + "_code", CodeArg: l.ID + "_code",
		Versions: versions, Describe: l.Describe, LeavesRunning: l.LeavesRunning,
		Globals: f.Globals, CodeMode: f.Tools, Network: f.Network,
	}
}

// WorkersFlag and MemoryFlag are the names of its pool's flags.
func (l Language) WorkersFlag() string { return l.flag("workers") }
func (l Language) MemoryFlag() string  { return l.flag("memory-limit") }

func (l Language) flag(name string) string {
	if l.FlagPrefix == "" {
		return name
	}
	return l.FlagPrefix + "-" + name
}

// DefaultWorkers is its pool's default size.
func (l Language) DefaultWorkers() int {
	if l.Workers > 0 {
		return l.Workers
	}
	return supervisor.DefaultWorkers()
}

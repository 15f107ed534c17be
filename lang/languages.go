package lang

import (
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// The languages. A new one is one more Language here and in registered.
var (
	// Python in Pyodide: the first language, served when --languages
	// names none, whose tool is mcp-run-python's run_python_code; the
	// only one with packages, the network, globals and code mode (its
	// engine's Features).
	Python = Language{ID: "python", Title: "Python", Article: "a", Engine: supervisor.Python,
		Describe: mcp.DescribePython, LeavesRunning: "an asyncio task, a timer", Runtime: "Pyodide",
		SelfTest: SelfTest{
			Hello: "import sys\nprint('hello')\nsum(range(10))", HelloStdout: "hello\n", HelloValue: "45",
			ReadsHost: "import js\ntry:\n    js.Deno.readTextFileSync('/etc/passwd')\n    leaked = True\nexcept Exception:\n    leaked = False\nleaked",
			Loop:      "while True:\n    pass",
		}}
	// R in webR: one worker by default, as webR idles at 300-440 MB
	// resident (its engine's memory limit says more).
	R = Language{ID: "r", Title: "R", Article: "an", FlagPrefix: "r", Workers: 1, Engine: supervisor.R,
		Describe: mcp.DescribeR, Runtime: "webR",
		SelfTest: SelfTest{
			Hello: "cat('hello\\n')\nsum(0:9)", HelloStdout: "hello\n[1] 45\n", HelloValue: "45",
			ReadsHost: "tryCatch({ readLines('/etc/passwd'); TRUE }, error = function(e) FALSE, warning = function(w) FALSE)",
			Loop:      "repeat {}",
		}}
	// JavaScript and TypeScript in Deno Workers with no permissions; its
	// code can leave timers and promises running between a session's calls.
	JavaScript = Language{ID: "javascript", Title: "JavaScript", Article: "a", FlagPrefix: "js", Workers: 1,
		Engine: supervisor.JavaScript, Describe: mcp.DescribeJavaScript, LeavesRunning: "a timer, a promise", Runtime: "TypeScript",
		SelfTest: SelfTest{
			Hello: "console.log('hello');\n[...Array(10).keys()].reduce((a, b) => a + b, 0)", HelloStdout: "hello\n", HelloValue: "45",
			ReadsHost: "let leaked;\ntry {\n  Deno.readTextFileSync('/etc/passwd');\n  leaked = true;\n} catch {\n  leaked = false;\n}\nleaked",
			Loop:      "while (true) {}",
		}}
)

// registered are the languages pyrun serves, in the order it lists them.
var registered = [...]Language{Python, R, JavaScript}

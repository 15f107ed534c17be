package lang

import (
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// Python in Pyodide: the first language, whose tool, run_python_code, is
// mcp-run-python's, and the only one with packages, the network, globals
// and code mode (its engine's Features).
var Python = Language{
	ID: "python", Title: "Python", Article: "a",
	Engine:        supervisor.Python,
	Describe:      mcp.DescribePython,
	LeavesRunning: "an asyncio task, a timer",
}

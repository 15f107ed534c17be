package lang

import (
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// JavaScript and TypeScript in Deno Workers with no permissions: one
// worker by default. Its code can leave timers and promises running
// between a session's calls.
var JavaScript = Language{
	ID: "javascript", Title: "JavaScript", Article: "a",
	FlagPrefix:    "js",
	Workers:       1,
	Engine:        supervisor.JavaScript,
	Describe:      mcp.DescribeJavaScript,
	LeavesRunning: "a timer, a promise",
}

package lang

import (
	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/supervisor"
)

// R in webR: one worker by default, as webR idles at 300-440 MB resident
// (the engine's memory limit says more).
var R = Language{
	ID: "r", Title: "R", Article: "an",
	FlagPrefix: "r",
	Workers:    1,
	Engine:     supervisor.R,
	Describe:   mcp.DescribeR,
}

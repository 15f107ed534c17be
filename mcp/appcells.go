package mcp

import (
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/apps"
	"github.com/pyrun/pyrun/supervisor"
)

// noteCell keeps a session call's code for the MCP App view and puts the
// session's earlier cells in out's _meta (apps.CellsMetaKey), so that the
// view of a session's call lists the session's cells in order. Only for a
// client that declared the extension: every other client's result is as
// it was, and nothing is kept for it.
func (s *Server) noteCell(req *sdk.CallToolRequest, lt *languageTool, a toolArgs, res supervisor.Result, out *sdk.CallToolResult) {
	if res.SessionID == "" || req == nil || !apps.Negotiated(req) {
		return
	}
	earlier, n := s.cells.Add(res.SessionID, apps.Cell{Tool: lt.lang.Tool, Code: a.PythonCode, Status: string(res.Status)})
	if a.EndSession {
		s.cells.End(res.SessionID)
	}
	out.Meta = sdk.Meta{apps.CellsMetaKey: map[string]any{"session_id": res.SessionID, "n": n, "earlier": earlier}}
}

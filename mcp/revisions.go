package mcp

import "github.com/pyrun/pyrun/mcp/httpfront"

// Protocol revisions. pyrun speaks MCP 2026-07-28 beside the four
// handshake-era revisions. The two families differ in their life cycle:
//
//   - 2024-11-05 to 2025-11-25 open a session (initialize; over Streamable
//     HTTP an Mcp-Session-Id), set the session's log level with
//     logging/setLevel, and cancel with notifications/cancelled.
//   - 2026-07-28 has no session: every request carries its revision, the
//     client's capabilities and its log level in _meta (and the revision in
//     the MCP-Protocol-Version header), server/discover replaces initialize,
//     and a call's POST is its whole life, so a client cancels by dropping
//     it.
//
// The SDK (go-sdk v1.8.0) serves 2026-07-28 over HTTP only from a handler
// made with Stateless: true, so /mcp holds two SDK handlers and picks one
// per request by its MCP-Protocol-Version header (httpfront.byRevision).
// Over stdio and HTTP+SSE one connection is one session and the SDK serves
// every revision there itself.
//
// Live output follows each family's rule with no code of pyrun's: the SDK's
// ServerSession.Log takes the level from the request's _meta
// (io.modelcontextprotocol/logLevel, carried in the handler's context) for a
// 2026-07-28 request, and from logging/setLevel for an older session;
// without a level no message is sent.

// ProtocolVersions are the MCP revisions pyrun serves, newest first.
var ProtocolVersions = []string{revision20260728, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// revision20260728 is the first stateless revision.
const revision20260728 = httpfront.StatelessRevision

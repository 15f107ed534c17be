package mcp

import (
	"net/http"
	"slices"
)

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
// made with Stateless: true, and a stateful handler answers such requests
// with an error. So /mcp holds two SDK handlers over the same server and
// picks one per request by its MCP-Protocol-Version header: 2026-07-28 or
// later (a later one is answered by the SDK with the revisions it supports,
// for the client to choose) goes to the stateless one; anything else,
// including an initialize that has no header yet, to the handler of the
// older revisions, stateful unless --stateless. Over stdio and HTTP+SSE one
// connection is one session and the SDK serves every revision there itself.
//
// Live output follows each family's rule with no code of pyrun's: the SDK's
// ServerSession.Log takes the level from the request's _meta
// (io.modelcontextprotocol/logLevel, carried in the handler's context) for a
// 2026-07-28 request, and from logging/setLevel for an older session;
// without a level no message is sent.

// ProtocolVersions are the MCP revisions pyrun serves, newest first.
var ProtocolVersions = []string{revision20260728, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// revision20260728 is the first stateless revision.
const revision20260728 = "2026-07-28"

// protocolVersionHeader names the revision of a request over Streamable
// HTTP (from 2025-06-18 on; 2026-07-28 requires it on every request).
const protocolVersionHeader = "Mcp-Protocol-Version"

// byRevision routes a /mcp request to stateless when it speaks 2026-07-28
// or later, and to legacy otherwise.
func byRevision(legacy, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isStatelessRevision(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// isStatelessRevision reports whether r speaks a session-less revision.
// Revisions are dates, so they compare as strings.
func isStatelessRevision(r *http.Request) bool {
	v := r.Header.Get(protocolVersionHeader)
	return v >= revision20260728 && !slices.Contains(ProtocolVersions[1:], v)
}

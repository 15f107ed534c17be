package mcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Who calls. Behind access control (HTTPOptions.Protect with the go-sdk's
// auth.RequireBearerToken) a request's context carries an auth.TokenInfo
// whose UserID is the client's identity. A session's handlers see the
// context of the request that opened it, and a session only takes requests
// from its opener: the SDK binds Streamable HTTP sessions to that UserID,
// and httpfront binds HTTP+SSE sessions the same way.

// Anonymous is the client of calls made without credentials: over stdio,
// and over HTTP without access control.
const Anonymous = "anonymous"

// clientOf is the identity of the client that made req.
func clientOf(ctx context.Context, req *sdk.CallToolRequest) string {
	var extra *sdk.RequestExtra
	if req != nil {
		extra = req.Extra
	}
	return clientOfExtra(ctx, extra)
}

// clientOfExtra is the identity of the client of any request.
func clientOfExtra(ctx context.Context, extra *sdk.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID
	}
	if ti := auth.TokenInfoFromContext(ctx); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	return Anonymous
}

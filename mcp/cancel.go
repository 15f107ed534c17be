package mcp

import (
	"context"
	"errors"
	"io"
)

// Cancellation. A call stops, as a timeout stops it (interrupt, then kill),
// when its handler's context ends: the SDK ends it on notifications/cancelled
// and when a stdio client hangs up. On Streamable HTTP the SDK does not end
// it when the client drops the POST that carried the call; httpfront ties
// the two together (httpfront.ErrRequestClosed).

// cancelCause says, for pyrun's log, why a call's context ended.
func cancelCause(ctx context.Context) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, io.EOF):
		return "the client hung up"
	case errors.Is(cause, context.Canceled):
		return "the client cancelled it (notifications/cancelled)"
	default:
		return cause.Error()
	}
}

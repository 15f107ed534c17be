package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/httpfront"
)

// The front end's limits, shared by the transports (package flow): what
// waits to be written to a client, and the request bytes held. The HTTP
// transports' own (sessions, deadlines, a session ended while its calls
// run) are in package httpfront.

// frontState is the Server's share of them.
type frontState struct {
	counters *flow.Counters
	out      *flow.Deliveries
	bytes    *flow.RequestBytes // request bytes held
}

func (f *frontState) init() {
	f.counters = flow.NewCounters()
	f.out = flow.NewDeliveries(f.counters)
	f.bytes = flow.NewRequestBytes(f.counters)
}

// handle runs a call within the front end's limits: it is refused while its
// session's results are not being read, its result waits for room to be
// written, and it stops when its session is ended. The stream its result
// goes out on comes with ctx: a Streamable HTTP POST's (httpfront), an
// HTTP+SSE or stdio session's.
func (s *Server) handle(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	st := flow.StreamOf(ctx)
	if err := st.Admit(); err != nil {
		return toolError(err), nil
	}
	// A Streamable HTTP POST's bytes are held from its body's first byte
	// to its answer (httpfront); the arguments of the others' calls
	// (HTTP+SSE, whose POST is answered once the call is queued, and
	// stdio) are counted here, until the result.
	if st != nil && st.Transport() != "streamable" && req != nil && req.Params != nil {
		n := int64(len(req.Params.Arguments))
		if st.Transport() == "stdio" {
			defer s.front.bytes.Force(st.Client(), n)() // its reader waits for room instead
		} else {
			release, err := s.front.bytes.Reserve(st.Client(), n)
			if err != nil {
				return finish(st, toolError(err)), nil
			}
			defer release()
		}
	}
	res, err := s.runCall(ctx, req)
	if errors.Is(context.Cause(ctx), httpfront.ErrSessionEnded) {
		s.front.counters.DeleteCancelled.Inc()
		res, err = toolError(fmt.Errorf("the call was stopped: %w", httpfront.ErrSessionEnded)), nil
	}
	return finish(st, res), err
}

// finish gives res its room on st, where it waits to be written, or puts
// a short error in its place when there is none.
func finish(st *flow.Stream, res *sdk.CallToolResult) *sdk.CallToolResult {
	if st == nil || res == nil {
		return res
	}
	measure := func() int64 {
		if b, err := json.Marshal(res); err == nil {
			return int64(len(b))
		}
		return 1 << 10
	}
	if err := st.Finish(textBytes(res), measure); err != nil {
		return toolError(err)
	}
	return res
}

// textBytes counts the text a result carries, a little less than its
// encoded size (JSON's names, quotes and escapes are not counted).
func textBytes(res *sdk.CallToolResult) int64 {
	n := 64
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			n += len(c.Text)
		case *sdk.ImageContent:
			n += len(c.Data) * 4 / 3
		case *sdk.AudioContent:
			n += len(c.Data) * 4 / 3
		default:
			n += 256
		}
	}
	if sc, ok := res.StructuredContent.(Structured); ok {
		n += len(sc.Stdout) + len(sc.Stderr) + len(sc.ReturnValue) + 128*(len(sc.Displays)+len(sc.Files))
		for _, c := range sc.Output {
			n += len(c.Text)
		}
		if sc.Error != nil {
			n += len(*sc.Error)
		}
	}
	return int64(n)
}

package codemode

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/pyrun/pyrun/mcp/idscan"
)

// What an MCP server sends is read as untrusted: a message past the size
// limit, or one that does not decode, fails the one call it answers (when
// pyrun can tell which) and is otherwise dropped; the connection, which
// every run shares, goes on. The SDK's transports end the connection at
// such a message, failing the calls of every run in flight on it.

// DefaultMaxMessage bounds one message from an MCP server (a line on
// stdio, a response body or an event over HTTP): the SDK's own default.
const DefaultMaxMessage = 16 << 20

// codeRefusedAnswer is the JSON-RPC error code of the answer pyrun gives a
// call in place of a message it refused; it is in the range JSON-RPC leaves
// to implementations, and never sent on the wire.
const codeRefusedAnswer = -32090

// Reasons a message is refused, as pyrun_mcp_messages_refused_total counts them.
const (
	RefusedTooLarge  = "too-large"
	RefusedMalformed = "malformed"
)

// RefusedReasons lists every reason, for metrics.
var RefusedReasons = []string{RefusedTooLarge, RefusedMalformed}

// guard refuses the messages of one server's connections, counts and logs
// them. Its methods are safe for concurrent use.
type guard struct {
	server  string
	max     int
	log     hclog.Logger
	counted func(reason string) // one refusal more, for metrics; may be nil

	refused atomic.Int64
}

// logBurst is how many refusals are logged one by one; past it, one line
// per logEvery says how many more there were.
const (
	logBurst = 20
	logEvery = 1000
)

// refuseIn counts and logs a refused message, and returns the answer that
// takes its place for the call it answers (by its id, as sc read it), or
// nil if it answers none. size is the message's size in bytes, detail what
// was wrong.
func (g *guard) refuseIn(sc *idscan.Scanner, reason string, size int, detail error) jsonrpc.Message {
	id, ok := sc.Answer()
	return g.refuse(id, ok, reason, size, detail)
}

// refuse is refuseIn for a message known to answer the call id, if ok.
func (g *guard) refuse(id jsonrpc.ID, ok bool, reason string, size int, detail error) jsonrpc.Message {
	if g.counted != nil {
		g.counted(reason)
	}
	g.note(reason, size, ok, detail)
	if !ok {
		return nil
	}
	var msg string
	switch reason {
	case RefusedTooLarge:
		msg = fmt.Sprintf("pyrun: the MCP server %q answered with a message past the limit of %s (max_tool_message); this call failed, the connection is kept",
			g.server, sizeString(g.max))
	default:
		msg = fmt.Sprintf("pyrun: the MCP server %q answered with a message pyrun cannot read (%s); this call failed, the connection is kept",
			g.server, clipName(detail.Error()))
	}
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: codeRefusedAnswer, Message: msg}}
}

// note logs a refusal, the first logBurst one by one and then one line in
// logEvery: a server that writes garbage without end does not flood the log.
func (g *guard) note(reason string, size int, answered bool, detail error) {
	n := g.refused.Add(1)
	switch {
	case n <= logBurst:
		g.log.Warn("refused a message from the MCP server", "reason", reason, "bytes", size,
			"answered_a_call", answered, "detail", clipName(fmt.Sprint(detail)))
	case n%logEvery == 0:
		g.log.Warn("refused more messages from the MCP server", "reason", reason, "refused", n)
	}
}

// errTooLarge is the detail of a message past the limit.
var errTooLarge = errors.New("message too large")

func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

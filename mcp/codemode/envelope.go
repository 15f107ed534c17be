package codemode

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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

// envelope follows the top level of a JSON-RPC message as its bytes go by,
// keeping only what answering for it needs: its id (when short) and
// whether it has a method (a request or notification, which has no call
// of pyrun's to fail). It holds a few hundred bytes whatever the message's
// size, and makes what it can of broken JSON.
type envelope struct {
	depth      int
	inString   bool
	escaped    bool
	object     bool // the message is a JSON object
	keyNext    bool // at depth 1, the next string is a key
	inKey      bool
	key        []byte
	keyLong    bool
	lastKey    string
	inID       bool // reading the value of "id"
	id         []byte
	idBad      bool // the id is nested or too long to use
	idDone     bool
	hasMethod  bool
	hasPayload bool // "result" or "error" seen
}

// maxIDBytes bounds an id envelope keeps; pyrun's own are small integers.
const maxIDBytes = 128

func (e *envelope) feed(b []byte) {
	for _, c := range b {
		e.step(c)
	}
}

func (e *envelope) step(c byte) {
	if e.inString {
		switch {
		case e.escaped:
			e.escaped = false
		case c == '\\':
			e.escaped = true
		case c == '"':
			e.inString = false
		}
		switch {
		case e.inKey && !e.inString:
			e.inKey = false
			e.lastKey = string(e.key)
			if e.keyLong {
				e.lastKey = ""
			}
		case e.inKey:
			if len(e.key) < 16 {
				e.key = append(e.key, c)
			} else {
				e.keyLong = true
			}
		case e.inID && e.depth == 1:
			e.appendID(c)
		}
		return
	}
	switch c {
	case ' ', '\t', '\r', '\n':
		return
	case '"':
		e.inString = true
		if e.depth == 1 && e.keyNext {
			e.inKey, e.keyNext, e.keyLong = true, false, false
			e.key = e.key[:0]
			return
		}
	case '{', '[':
		if e.depth == 0 {
			e.object = c == '{'
			e.keyNext = e.object
		} else if e.inID && e.depth == 1 {
			e.idBad = true // an id is a number or a string
		}
		e.depth++
		return
	case '}', ']':
		e.depth--
		if e.depth == 0 {
			e.endValue()
		}
		return
	case ':':
		if e.depth == 1 {
			switch e.lastKey {
			case "id":
				e.inID, e.id, e.idBad = true, e.id[:0], false
			case "method":
				e.hasMethod = true
			case "result", "error":
				e.hasPayload = true
			}
			return
		}
	case ',':
		if e.depth == 1 {
			e.endValue()
			e.keyNext = true
			return
		}
	}
	if e.inID && e.depth == 1 {
		e.appendID(c)
	}
}

func (e *envelope) appendID(c byte) {
	if len(e.id) >= maxIDBytes {
		e.idBad = true
		return
	}
	e.id = append(e.id, c)
}

func (e *envelope) endValue() {
	if e.inID {
		e.inID = false
		e.idDone = !e.idBad && len(e.id) > 0
	}
}

// answerFor is the id of the call the message answers, if it answers one
// pyrun could have made: it has an id, a result or an error, and no method.
func (e *envelope) answerFor() (jsonrpc.ID, bool) {
	e.endValue() // a message cut off just after its id
	if !e.object || e.hasMethod || !e.hasPayload || !e.idDone {
		return jsonrpc.ID{}, false
	}
	var v any
	if json.Unmarshal(e.id, &v) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil || !id.IsValid() {
		return jsonrpc.ID{}, false
	}
	return id, true
}

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
// takes its place for the call it answers (by its id, as env read it), or
// nil if it answers none. size is the message's size in bytes, detail what
// was wrong.
func (g *guard) refuseIn(env *envelope, reason string, size int, detail error) jsonrpc.Message {
	id, ok := env.answerFor()
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

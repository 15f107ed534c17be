// Package idscan reads the id of a JSON-RPC message that pyrun will not
// keep whole (too large, or not decodable), as its bytes go by, so that
// the message can still be answered, or its call failed, by that id: a
// request a client sent pyrun (mcp's stdio, httpfront), an answer an MCP
// server sent code mode (codemode).
//
//	var sc idscan.Scanner
//	_, _ = io.Copy(&sc, body)
//	if id, ok := sc.ID(); ok { ... answer the request id ... }
//	if id, ok := sc.Answer(); ok { ... fail the call id ... }
package idscan

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A Scanner reads the "id" and "method" members of a JSON-RPC message, and
// whether it has a "result" or an "error", as its bytes go by: it is fed
// the message in pieces (Write) and keeps a few states and at most
// maxIDBytes of the values it looks for, whatever the message's size. It
// tokenizes only as far as finding those members needs (strings, nesting,
// the top-level object's keys and values); a message that is not such an
// object yields no id. The zero Scanner is ready for a message.
type Scanner struct {
	depth    int  // nesting: 1 inside the top-level object
	inString bool // inside a string at any depth
	escaped  bool // after a backslash in that string
	state    scanState
	key      []byte // the top-level key being read (at most maxIDBytes+1)
	capture  *[]byte
	id       []byte // the id's JSON text, once read whole
	method   []byte // the method's JSON text, once read whole
	idOK     bool
	methodOK bool
	// hasMethod and hasPayload: a top-level "method", and a "result" or
	// "error", whatever their values.
	hasMethod, hasPayload bool
	broken                bool // not an object of the expected shape: give up
}

type scanState int

const (
	scanStart  scanState = iota // before the top-level '{'
	scanKey                     // expecting a key or '}'
	scanInKey                   // inside a top-level key string
	scanColon                   // after a key, expecting ':'
	scanValue                   // expecting a value
	scanScalar                  // inside a top-level number, literal or string value
	scanNested                  // inside a top-level object or array value
	scanAfter                   // after a value, expecting ',' or '}'
	scanDone                    // after the top-level '}'
)

// maxIDBytes bounds what Scanner keeps of an id, a method or a key: the
// ids pyrun answers are strings or integers of a few bytes.
const maxIDBytes = 256

func (s *Scanner) Write(p []byte) (int, error) {
	for _, c := range p {
		if s.broken || s.state == scanDone {
			break
		}
		s.step(c)
	}
	return len(p), nil
}

func (s *Scanner) keep(c byte) {
	if s.capture != nil && len(*s.capture) <= maxIDBytes {
		*s.capture = append(*s.capture, c)
	}
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *Scanner) step(c byte) {
	if s.inString {
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
		}
		switch s.state {
		case scanInKey:
			if s.inString {
				if len(s.key) <= maxIDBytes {
					s.key = append(s.key, c)
				}
			} else {
				s.state = scanColon
			}
		case scanScalar:
			s.keep(c)
			if !s.inString {
				s.endValue()
				s.state = scanAfter
			}
		}
		return
	}
	switch s.state {
	case scanStart:
		switch {
		case c == '{':
			s.depth, s.state = 1, scanKey
		case !space(c):
			s.broken = true
		}
	case scanKey:
		switch {
		case c == '"':
			s.inString, s.key, s.state = true, s.key[:0], scanInKey
		case c == '}':
			s.state = scanDone
		case !space(c):
			s.broken = true
		}
	case scanColon:
		switch {
		case c == ':':
			s.state = scanValue
			switch string(s.key) {
			case "method":
				s.hasMethod = true
			case "result", "error":
				s.hasPayload = true
			}
		case !space(c):
			s.broken = true
		}
	case scanValue:
		if space(c) {
			return
		}
		switch string(s.key) {
		case "id":
			s.id, s.capture = s.id[:0], &s.id
		case "method":
			s.method, s.capture = s.method[:0], &s.method
		}
		s.keep(c)
		switch c {
		case '"':
			s.inString, s.state = true, scanScalar
		case '{', '[':
			s.depth++
			s.state = scanNested
		default:
			s.state = scanScalar
		}
	case scanScalar:
		// A number or literal: it ends at what cannot be part of it.
		switch {
		case c == ',':
			s.endValue()
			s.state = scanKey
		case c == '}':
			s.endValue()
			s.state = scanDone
		case space(c):
			s.endValue()
			s.state = scanAfter
		default:
			s.keep(c)
		}
	case scanNested:
		s.keep(c)
		switch c {
		case '"':
			s.inString = true
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth--; s.depth == 1 {
				s.endValue()
				s.state = scanAfter
			}
		}
	case scanAfter:
		switch {
		case c == ',':
			s.state = scanKey
		case c == '}':
			s.state = scanDone
		case !space(c):
			s.broken = true
		}
	}
}

// endValue ends the top-level value being read: a captured id or method
// is kept if it was read whole.
func (s *Scanner) endValue() {
	if s.capture == nil {
		return
	}
	whole := len(*s.capture) <= maxIDBytes
	if s.capture == &s.id {
		s.idOK = whole
	} else {
		s.methodOK = whole
	}
	s.capture = nil
}

// ID is the message's id: a string or a number, when the message had
// one (a request); ok is false otherwise (a notification, a message too
// broken to tell, an id that is no JSON-RPC id).
func (s *Scanner) ID() (id jsonrpc.ID, ok bool) {
	if !s.idOK {
		return jsonrpc.ID{}, false
	}
	var v any
	if json.Unmarshal(s.id, &v) != nil || v == nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(v)
	return id, err == nil
}

// Method is the message's method, when it had a string one.
func (s *Scanner) Method() (string, bool) {
	var m string
	if !s.methodOK || json.Unmarshal(s.method, &m) != nil {
		return "", false
	}
	return m, true
}

// HasMethod says whether the message has a top-level "method", whatever its
// value: it is a request or a notification, not an answer.
func (s *Scanner) HasMethod() bool { return s.hasMethod }

// Answer is the id of the request the message answers: it has an id, a
// "result" or an "error", and no "method". A message cut off just after a
// number id still tells it.
func (s *Scanner) Answer() (jsonrpc.ID, bool) {
	if s.capture == &s.id && s.state == scanScalar && !s.inString {
		s.endValue() // the id was the last of the message's bytes
	}
	if s.hasMethod || !s.hasPayload {
		return jsonrpc.ID{}, false
	}
	id, ok := s.ID()
	return id, ok && id.IsValid()
}

package codemode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/pyrun/pyrun/mcp/idscan"
)

// httpGuard reads the responses of a Streamable HTTP server as untrusted,
// before the SDK's client does: a JSON body or an event past the limit, or
// one that is not a JSON-RPC message, is replaced by an answer that fails
// the call it was for (or dropped, when it was for none). The SDK's client
// ends the whole connection at such a response, and with it the calls of
// every run in flight on it.
type httpGuard struct {
	guard *guard
	rt    http.RoundTripper
}

func (g httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	id, isCall := callID(req)
	resp, err := g.rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch media {
	case "application/json":
		if req.Method == http.MethodPost {
			g.checkJSON(resp, id, isCall)
		}
	case "text/event-stream":
		resp.Body = &sseGuard{guard: g.guard, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), call: id, isCall: isCall}
	}
	return resp, nil
}

// callID is the id of the JSON-RPC call a request carries, if it carries
// one. The body is pyrun's own, and the SDK sets GetBody.
func callID(req *http.Request) (jsonrpc.ID, bool) {
	if req.Method != http.MethodPost || req.GetBody == nil {
		return jsonrpc.ID{}, false
	}
	body, err := req.GetBody()
	if err != nil {
		return jsonrpc.ID{}, false
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	msg, err := jsonrpc.DecodeMessage(b)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() {
		return r.ID, true
	}
	return jsonrpc.ID{}, false
}

// checkJSON reads a JSON response within the limit and, if it is too large
// or not a JSON-RPC message, puts the call's failure in its place; a
// response to no call becomes 202 Accepted with no body, which the SDK
// takes as nothing to read.
func (g httpGuard) checkJSON(resp *http.Response, id jsonrpc.ID, isCall bool) {
	limit := g.guard.max
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	_ = resp.Body.Close()
	var reason string
	var detail error
	switch {
	case err != nil:
		// The body broke off: the SDK would fail the connection.
		reason, detail = RefusedMalformed, err
	case len(b) > limit:
		reason, detail = RefusedTooLarge, errTooLarge
	default:
		if _, err := jsonrpc.DecodeMessage(b); err != nil {
			reason, detail = RefusedMalformed, err
		}
	}
	if reason == "" {
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return
	}
	answer := g.guard.refuse(id, isCall, reason, len(b), detail)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	if answer == nil {
		resp.StatusCode, resp.Status = http.StatusAccepted, "202 Accepted"
		resp.Body = http.NoBody
		return
	}
	out, _ := jsonrpc.EncodeMessage(answer)
	resp.Body = io.NopCloser(bytes.NewReader(out))
}

// sseGuard passes a server's event stream on, event by event, each within
// the limit and a JSON-RPC message, in the form the SDK reads (field
// lines, the data on one line). An event past the limit is read through
// without being kept; it and an event that does not decode are replaced by
// the failure of the call the stream is for, or dropped when they were a
// request or notification of the server's.
type sseGuard struct {
	guard  *guard
	body   io.ReadCloser
	r      *bufio.Reader
	call   jsonrpc.ID // the call of the POST that opened the stream
	isCall bool

	out bytes.Buffer // what Read hands on next
	err error        // the stream's end, once out is empty
}

func (s *sseGuard) Read(p []byte) (int, error) {
	for s.out.Len() == 0 && s.err == nil {
		s.err = s.nextEvent()
	}
	if s.out.Len() > 0 {
		return s.out.Read(p)
	}
	return 0, s.err
}

func (s *sseGuard) Close() error { return s.body.Close() }

// sseEvent is an event being read.
type sseEvent struct {
	id, name, retry string
	data            []byte
	hasData         bool
	size            int
	over            bool // past the limit: data is not kept
	scan            idscan.Scanner
}

// sseSlack is room past the limit for an event's fields other than its
// data (id, event, retry), each at most maxSSEField.
const (
	sseSlack    = 1 << 10
	maxSSEField = 256
)

// nextEvent reads one event into s.out; it returns the stream's error
// once it has ended.
func (s *sseGuard) nextEvent() error {
	limit := s.guard.max
	var ev sseEvent
	for {
		line, skipped, err := s.line(&ev, limit)
		switch {
		case skipped:
		case len(line) == 0 && err == nil:
			s.emit(&ev) // a blank line ends the event
			return nil
		case len(line) > 0:
			s.field(&ev, line)
		}
		if err != nil {
			s.emit(&ev)
			return err
		}
	}
}

// line reads one line, without its end. A line past the limit is not
// kept: the event is marked over, and its data (what the event had, and
// the rest of the line) goes to the id scanner only (skipped is true).
func (s *sseGuard) line(ev *sseEvent, limit int) (line []byte, skipped bool, err error) {
	for {
		var frag []byte
		frag, err = s.r.ReadSlice('\n')
		ev.size += len(frag)
		switch {
		case skipped:
			_, _ = ev.scan.Write(frag)
		case len(line)+len(frag) > limit+sseSlack:
			skipped = true
			if !ev.over {
				ev.over = true
				_, _ = ev.scan.Write(ev.data)
				ev.data = nil
			}
			if rest, ok := bytes.CutPrefix(append(line, frag...), []byte("data:")); ok {
				_, _ = ev.scan.Write([]byte{'\n'})
				_, _ = ev.scan.Write(rest)
			}
			line = nil
		default:
			line = append(line, frag...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimRight(line, "\r\n"), skipped, err
		}
	}
}

// field records one line of an event.
func (s *sseGuard) field(ev *sseEvent, line []byte) {
	if line[0] == ':' {
		return // a comment
	}
	name, value, _ := bytes.Cut(line, []byte{':'}) // a line without ':' is a field with no value
	value = bytes.TrimPrefix(value, []byte{' '})
	if string(name) != "data" && len(value) > maxSSEField {
		return // no id, event name or retry is that long: not passed on
	}
	switch string(name) {
	case "id":
		ev.id = strings.TrimSpace(string(value))
	case "event":
		ev.name = strings.TrimSpace(string(value))
	case "retry":
		ev.retry = strings.TrimSpace(string(value))
	case "data":
		switch {
		case ev.over:
			_, _ = ev.scan.Write([]byte{'\n'})
			_, _ = ev.scan.Write(value)
		case ev.hasData:
			ev.data = append(append(ev.data, '\n'), value...)
		default:
			ev.data = append(ev.data, value...)
		}
		ev.hasData = true
		if !ev.over && len(ev.data) > s.guard.max {
			ev.over = true
			_, _ = ev.scan.Write(ev.data)
			ev.data = nil
		}
	}
}

// emit writes the event to s.out: as it came when it holds a message (its
// data compacted onto one line), or the failure of the stream's call in its
// place, or its other fields only.
func (s *sseGuard) emit(ev *sseEvent) {
	if ev.id == "" && ev.name == "" && ev.retry == "" && !ev.hasData && !ev.over {
		return
	}
	var data []byte
	message := ev.name == "" || ev.name == "message"
	if message && (ev.over || len(bytes.TrimSpace(ev.data)) > 0) {
		var reason string
		var detail error
		if ev.over {
			reason, detail = RefusedTooLarge, errTooLarge
		} else if _, err := jsonrpc.DecodeMessage(ev.data); err != nil {
			reason, detail = RefusedMalformed, err
			_, _ = ev.scan.Write(ev.data)
		} else {
			var c bytes.Buffer
			if json.Compact(&c, ev.data) == nil {
				data = c.Bytes()
			}
		}
		if reason != "" {
			// On a POST's stream, a message without a method answers the call.
			ok := s.isCall && !ev.scan.HasMethod()
			if answer := s.guard.refuse(s.call, ok, reason, ev.size, detail); answer != nil {
				data, _ = jsonrpc.EncodeMessage(answer)
			}
		}
	} else if !ev.over {
		data = ev.data
	}
	if ev.id == "" && ev.name == "" && ev.retry == "" && len(data) == 0 {
		return // all it had was refused
	}
	if ev.id != "" {
		s.out.WriteString("id: " + ev.id + "\n")
	}
	if ev.name != "" {
		s.out.WriteString("event: " + ev.name + "\n")
	}
	if ev.retry != "" {
		s.out.WriteString("retry: " + ev.retry + "\n")
	}
	if len(data) > 0 {
		s.out.WriteString("data: ")
		s.out.Write(bytes.ReplaceAll(data, []byte{'\n'}, []byte("\ndata: ")))
		s.out.WriteByte('\n')
	}
	s.out.WriteByte('\n')
}

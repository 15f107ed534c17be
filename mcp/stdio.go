package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/flow"
	"github.com/pyrun/pyrun/mcp/idscan"
)

// stdio: the SDK's transport ends the session at the first line that is not
// a JSON-RPC message, losing the calls in flight, and writes results to
// stdout for as long as the parent lets it. pyrun puts a line filter in
// front of it, which answers a bad line with the JSON-RPC error (-32700 for
// what is not JSON, -32600 for JSON that is no JSON-RPC message) and goes on,
// and which reads no new line while the results already written wait for
// the parent to read them (backpressure: the parent's pipe fills, not
// pyrun's memory).

// runIO serves one client on r and w until it hangs up or ctx ends.
func (s *Server) runIO(ctx context.Context, r io.ReadCloser, w io.Writer) error {
	return s.runLines(ctx, "stdio", r, w)
}

// runLines serves one session of the local client (Anonymous) on r and w,
// lines of JSON-RPC, until it hangs up or ctx ends: stdio's, or one
// connection's on the socket (socket.go); transport names it in logs and
// metrics.
func (s *Server) runLines(ctx context.Context, transport string, r io.ReadCloser, w io.Writer) error {
	st := s.front.out.Open(new(flow.Backlog), Anonymous, transport, nil)
	defer st.Close()
	ctx = flow.WithStream(ctx, st)
	ctx, cancel := context.WithCancel(ctx) // ends the session's task waits
	defer cancel()
	out := &stdioWriter{w: w, st: st}
	tasks := newLineTasks(s, out, ctx)
	out.tasks = tasks
	in := &stdioReader{r: r, br: bufio.NewReaderSize(r, 64<<10), out: out, st: st, ctx: ctx, log: s.log.Named(transport),
		max: int(MaxRequestBody(s.options().MaxCode)), counters: s.front.counters, bytes: s.front.bytes, tasks: tasks}
	// As the SDK's Server.Run, keeping the session for the tasks.
	ss, err := s.sdk.Connect(ctx, &sdk.IOTransport{Reader: in, Writer: out, MaxLineLength: -1}, nil)
	if err != nil {
		return err
	}
	tasks.setSession(ss)
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-closed
		return ctx.Err()
	case err := <-closed:
		return err
	}
}

// stdioWriter serialises the SDK's writes with the filter's error answers;
// each Write is one whole line.
type stdioWriter struct {
	mu    sync.Mutex
	w     io.Writer
	st    *flow.Stream
	tasks *lineTasks // adds tasks to the answers that advertise them
}

func (o *stdioWriter) Write(b []byte) (int, error) {
	if o.tasks != nil {
		if nb := o.tasks.rewriteAnswer(b); len(nb) != len(b) {
			// The caller wrote all of b: say so, whatever was added.
			if _, err := o.write(nb); err != nil {
				return 0, err
			}
			return len(b), nil
		}
	}
	return o.write(b)
}

func (o *stdioWriter) write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.w.Write(b)
	if err == nil {
		o.st.Wrote(n)
	}
	return n, err
}

func (o *stdioWriter) Close() error { return nil }

// stdioReader passes on the lines that are JSON-RPC messages (or batches of
// them) and answers the others.
type stdioReader struct {
	r   io.ReadCloser
	br  *bufio.Reader
	out *stdioWriter
	st  *flow.Stream
	ctx context.Context
	log hclog.Logger
	max int // longest line, in bytes

	counters *flow.Counters
	bytes    *flow.RequestBytes // what the calls in flight hold: read nothing more past the client's share

	tasks *lineTasks // answers tasks' requests (tasklines.go)

	buf []byte // the rest of the line being passed on
}

func (in *stdioReader) Read(p []byte) (int, error) {
	for len(in.buf) == 0 {
		line, err := in.next()
		if err != nil {
			return 0, err
		}
		in.buf = line
	}
	n := copy(p, in.buf)
	in.buf = in.buf[n:]
	return n, nil
}

func (in *stdioReader) Close() error { return in.r.Close() }

// next returns the next good line, with its newline.
func (in *stdioReader) next() ([]byte, error) {
	for {
		// Backpressure: nothing more is read while the parent does not read
		// the results already written.
		for waited := false; ; waited = true {
			err := in.st.BackedUp()
			if err == nil {
				if waited {
					in.log.Info("the client reads its results again: reading its requests again")
				}
				break
			}
			if !waited {
				in.log.Warn("not reading requests until the client reads the results written to it", "why", err.Error())
			}
			select {
			case <-in.st.Changed():
			case <-in.ctx.Done():
				return nil, in.ctx.Err()
			}
		}
		// And nothing while the calls in flight hold the client's share of
		// request bytes (client_max_request_bytes): the next line may be
		// as large as a line can be.
		if waited, err := in.bytes.Wait(in.ctx, Anonymous, int64(in.max)); err != nil {
			return nil, err
		} else if waited {
			in.log.Info("the calls in flight hold the client's share of request bytes (client_max_request_bytes); read the next request once they ended")
		}
		line, tooLong, err := in.readLine()
		if tooLong != nil {
			in.refuseLong(tooLong)
		} else if t := bytes.TrimSpace(line); len(t) > 0 {
			if id, code, msg := checkLine(t); code == 0 {
				if in.tasks != nil && in.tasks.intercept(t) {
					continue // answered by tasks, not the SDK
				}
				return append(t, '\n'), nil
			} else {
				in.answer(id, code, msg)
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads one line, without its newline. A line longer than
// in.max is not kept: its bytes go through an idscan.Scanner, returned as
// tooLong, which finds the id to answer with in bounded memory.
func (in *stdioReader) readLine() (line []byte, tooLong *idscan.Scanner, err error) {
	for {
		chunk, err := in.br.ReadSlice('\n')
		switch {
		case tooLong != nil:
			_, _ = tooLong.Write(chunk)
		case len(line)+len(chunk) > in.max+1:
			tooLong = &idscan.Scanner{}
			_, _ = tooLong.Write(line)
			_, _ = tooLong.Write(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// refuseLong answers a line longer than pyrun reads: with the request's
// own id, so that its client need not wait for its own timeout, and a
// message naming the limit. A response (an id and no method) gets none:
// its peer is waiting for nothing.
func (in *stdioReader) refuseLong(sc *idscan.Scanner) {
	in.counters.Refused.WithLabelValues("stdio_max_line").Inc()
	id, hasID := sc.ID()
	method, hasMethod := sc.Method()
	in.log.Warn("refused a message longer than pyrun reads on stdio", "limit", in.max, "id", id.Raw(), "method", method)
	if hasID && !hasMethod {
		return
	}
	what := "a message"
	if hasMethod {
		what = fmt.Sprintf("the %s request", method)
	}
	in.answer(id, jsonrpc.CodeInvalidRequest,
		fmt.Sprintf("invalid request: %s is longer than %d bytes, the most pyrun reads as one message on stdio (twice max_code plus 1 MiB, at least 4 MiB); none of it was run", what, in.max))
}

// checkLine says whether t is a JSON-RPC message or a batch of them; when
// it is not, the error to answer with.
func checkLine(t []byte) (jsonrpc.ID, int64, string) {
	if plainMessage(t) {
		return jsonrpc.ID{}, 0, ""
	}
	if !json.Valid(t) {
		return jsonrpc.ID{}, jsonrpc.CodeParseError, "parse error: the line is not JSON"
	}
	if t[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(t, &batch); err != nil || len(batch) == 0 {
			return jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: an empty batch"
		}
		for _, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: a batch holds what is not a JSON-RPC message: " + err.Error()
			}
		}
		return jsonrpc.ID{}, 0, ""
	}
	if _, err := jsonrpc.DecodeMessage(t); err != nil {
		var probe struct {
			ID any `json:"id"`
		}
		var id jsonrpc.ID
		if json.Unmarshal(t, &probe) == nil && probe.ID != nil {
			id, _ = jsonrpc.MakeID(probe.ID)
		}
		return id, jsonrpc.CodeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message: " + err.Error()
	}
	return jsonrpc.ID{}, 0, ""
}

// answer writes a JSON-RPC error response for a line that was refused; its
// id is null when the line's could not be read, as JSON-RPC 2.0 says.
func (in *stdioReader) answer(id jsonrpc.ID, code int64, msg string) {
	resp := struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id.Raw(), &jsonrpc.Error{Code: code, Message: msg}}
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	_, _ = in.out.Write(append(b, '\n'))
}

// plainMessage says whether t is, beyond doubt, a single JSON-RPC message
// the SDK takes: the common shape of a request, a notification or a result.
// It is the fast path of checkLine, a few microseconds where the SDK's own
// decoder (used for everything else) allocates 32 KiB twice per message. It
// accepts only a subset of what jsonrpc.DecodeMessage accepts, never more,
// since a line the SDK refuses ends its session: valid UTF-8, nesting within
// the SDK's 1000 levels, exact member names, "jsonrpc":"2.0", a string or
// small integer id, a string method, no error member.
// FuzzPlainMessage checks the subset against the SDK.
func plainMessage(t []byte) bool {
	if len(t) == 0 || t[0] != '{' || !utf8.Valid(t) || nestedDeeperThan(t, sdkMaxDepth) {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil {
		return false
	}
	for k := range m {
		switch k {
		case "jsonrpc", "id", "method", "params", "result":
		default:
			// The SDK matches member names exactly, the standard decoder
			// ignoring case: a near miss is left to the SDK to judge.
			if _, known := sdkMembers[strings.ToLower(k)]; known {
				return false
			}
		}
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		return false
	}
	id, hasID := m["id"]
	if hasID && !(isJSONString(id) || isSmallInteger(id) || string(id) == "null") {
		return false
	}
	if method, ok := m["method"]; ok {
		return isJSONString(method)
	}
	// A response: it needs a real id.
	return hasID && string(id) != "null"
}

// sdkMaxDepth is the deepest nesting the SDK's decoder takes.
const sdkMaxDepth = 1000

// sdkMembers are the members of a JSON-RPC message the SDK reads.
var sdkMembers = map[string]struct{}{"jsonrpc": {}, "id": {}, "method": {}, "params": {}, "result": {}, "error": {}}

func isJSONString(v json.RawMessage) bool { return len(v) >= 2 && v[0] == '"' }

// isSmallInteger says whether v is an integer the SDK reads as an int64 id
// without loss (it decodes ids as float64).
func isSmallInteger(v json.RawMessage) bool {
	digits := v
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// nestedDeeperThan says whether JSON text t nests objects and arrays more
// than limit levels deep, counting as the SDK does.
func nestedDeeperThan(t []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range t {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}

package supervisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// protocolVersion is the version of the pipe protocol (docs/protocol.md)
// this supervisor speaks; a worker announcing another one is refused.
const protocolVersion = 6

// request is a line the supervisor writes to a worker's stdin.
type request struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// Code is a run's code: always sent with a run, empty code included
	// (a run without code is a bad request); absent from other requests.
	Code *string `json:"code,omitempty"`
	// Globals is the JSON object of the call's globals as a string, so
	// that the worker hands it to Python without decoding and encoding it.
	Globals   string `json:"globals,omitempty"`
	MaxOutput int    `json:"max_output,omitempty"`
	// Interrupts counts the SIGUSR2 signals sent to this worker so far, so
	// that the worker can tell a late signal for the previous call from one
	// for this call.
	Interrupts int `json:"interrupts"`

	// Tools is the catalog of the host calls the call's code may make
	// (Job.Catalog), as JSON text; empty for none.
	Tools string `json:"tools,omitempty"`

	// Namespace is the session namespace a run is for on a session worker
	// shared by several sessions (SessionCall.Namespace); Drop, namespaces it
	// forgets first (docs/protocol.md, Sessions).
	Namespace string   `json:"namespace,omitempty"`
	Drop      []string `json:"drop,omitempty"`

	// checkpoint: Chunks asks the worker to name the checkpoint (its
	// token) and keep its heap chunks' sums for an increment to it later;
	// Since is the token of an earlier checkpoint of the worker's whose
	// chunks the supervisor holds (docs/protocol.md, Checkpoints).
	Chunks bool   `json:"chunks,omitempty"`
	Since  string `json:"since,omitempty"`

	// packages: the answer to a need event; Files to load, or Error.
	Files []packages.File `json:"files,omitempty"`
	Error string          `json:"error,omitempty"`

	richRequest // run: input files, /output/, caps on displays and files
	// tool_result: the answer to the tool_call event Call; Result (JSON
	// text) or Error.
	Call   string          `json:"call,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// event is any line a worker writes to its stdout. Fields are filled per Type.
type event struct {
	Type string `json:"type"`
	ID   string `json:"id"`

	// ready
	// Engine is the language the worker runs (Engine.Name); Versions,
	// what it runs, by name.
	Engine   string            `json:"engine"`
	Versions map[string]string `json:"versions"`

	Protocol  int    `json:"protocol"`
	Pyodide   string `json:"pyodide"`
	Python    string `json:"python"`
	StartupMS int64  `json:"startup_ms"`
	// Snapshot says whether the worker started from the snapshot it was
	// given; SnapshotError, why it did not.
	Snapshot      bool   `json:"snapshot"`
	SnapshotError string `json:"snapshot_error"`
	// WarmCalls are the calls of its own the worker runs while it waits
	// for its first (pyodide-host/warm.ts).
	WarmCalls int `json:"warm_calls"`
	// Settles: after each call's result the worker cleans up after the
	// call, then says "idle"; it reads no request before (conn.settle).
	Settles bool `json:"settles"`

	// output, package
	Stream string `json:"stream"`
	Text   string `json:"text"`

	// need: what the call's code needs before it runs
	Imports        []string          `json:"imports"`
	Requires       []string          `json:"requires"`
	RequiresPython string            `json:"requires_python"`
	Loaded         map[string]string `json:"loaded"`

	// display, file (rich.go)
	richEvent
	// tool_call: a host call of the running call's code (Job.Tools);
	// Args is the JSON text of its arguments.
	Call   string `json:"call"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Args   string `json:"args"`

	// result
	Status       string         `json:"status"`
	Value        *string        `json:"value"`
	ValueCut     bool           `json:"value_cut"` // the worker cut value at max_output
	Error        string         `json:"error"`
	ErrorCut     bool           `json:"error_cut"`
	Dependencies []string       `json:"dependencies"`
	Dropped      map[string]int `json:"dropped"`
	Recycle      string         `json:"recycle"`
	DurationMS   float64        `json:"duration_ms"`

	// checkpoint (checkpoint.go): the sizes of the memory snapshot and the
	// files' blob whose bytes follow the line, the worker's clock then, and
	// the reader of those bytes on the pipe (not JSON: readEvents sets it).
	Mem   int64   `json:"mem"`
	FS    int64   `json:"fs"`
	Clock float64 `json:"clock"`
	// Token names the checkpoint for a later increment; Since, the one
	// this is an increment to, whose heap chunks Kept (ranges: first,
	// count) it leaves out, LeftOut bytes (Image).
	Token   string     `json:"token"`
	Since   string     `json:"since"`
	Kept    [][2]int64 `json:"kept"`
	LeftOut int64      `json:"left_out"`
	blob    *blob
}

// errGarbage marks a worker that broke the protocol; it is retired.
var errGarbage = errors.New("worker broke the protocol")

// eventReader reads worker events line by line, refusing lines longer than
// max: a worker is untrusted and must not make the supervisor buffer without
// bound.
type eventReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newEventReader(r io.Reader, max int) *eventReader {
	return &eventReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next event. Errors other than io.EOF wrap errGarbage.
func (er *eventReader) next() (event, error) {
	er.buf = er.buf[:0]
	for {
		chunk, err := er.r.ReadSlice('\n')
		if len(er.buf)+len(chunk) > er.max {
			return event{}, fmt.Errorf("%w: line longer than %d bytes", errGarbage, er.max)
		}
		er.buf = append(er.buf, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(er.buf) > 0 {
			return event{}, fmt.Errorf("%w: output ended mid-line: %q", errGarbage, clip(er.buf, 200))
		}
		return event{}, err
	}
	return parseEvent(er.buf)
}

// parseEvent decodes and checks one protocol line.
func parseEvent(line []byte) (event, error) {
	var ev event
	if err := json.Unmarshal(line, &ev); err != nil {
		return event{}, fmt.Errorf("%w: %v in %q", errGarbage, err, clip(line, 200))
	}
	switch ev.Type {
	case "ready", "parked", "pong", "error", "idle":
	case "output":
		if ev.Stream != "stdout" && ev.Stream != "stderr" {
			return event{}, fmt.Errorf("%w: output on unknown stream %q", errGarbage, clip([]byte(ev.Stream), 64))
		}
	case "package", "need":
	case "checkpoint":
		if ev.Mem < 0 || ev.FS < 0 || (ev.Error != "" && ev.Mem+ev.FS > 0) {
			return event{}, fmt.Errorf("%w: checkpoint with bad sizes", errGarbage)
		}
		if ev.LeftOut < 0 || ev.LeftOut > ev.Mem || (ev.LeftOut > 0 || len(ev.Kept) > 0) && ev.Since == "" {
			return event{}, fmt.Errorf("%w: checkpoint with a bad increment", errGarbage)
		}
	case "display", "file":
		if err := checkRichEvent(ev); err != nil {
			return event{}, fmt.Errorf("%w: %v", errGarbage, err)
		}
	case "tool_call":
		if ev.Call == "" || len(ev.Call) > 64 || ev.Server == "" || ev.Tool == "" {
			return event{}, fmt.Errorf("%w: tool_call without call, server or tool", errGarbage)
		}
	case "result":
		if !knownWorkerStatus[ev.Status] {
			return event{}, fmt.Errorf("%w: result with unknown status %q", errGarbage, clip([]byte(ev.Status), 64))
		}
	default:
		return event{}, fmt.Errorf("%w: unknown event type %q", errGarbage, clip([]byte(ev.Type), 64))
	}
	return ev, nil
}

// knownWorkerStatus lists the statuses a worker may report in a result.
// "interrupted" is the worker's; the supervisor turns it into a timeout.
var knownWorkerStatus = map[string]bool{
	"success": true, "run-error": true, "install-error": true,
	"memory-error": true, "interrupted": true,
}

func clip(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	if len(b) > n {
		return b[:n]
	}
	return b
}

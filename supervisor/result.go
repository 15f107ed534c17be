package supervisor

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Status is how a call ended. The values are part of pyrun's contract.
type Status string

const (
	StatusSuccess      Status = "success"
	StatusRunError     Status = "run-error"
	StatusInstallError Status = "install-error"
	StatusTimeout      Status = "timeout"
	StatusMemoryError  Status = "memory-error"
	StatusCrashed      Status = "crashed"
)

// ExitCode is the exit status a shell would give a process that ended so.
func (s Status) ExitCode() int {
	switch s {
	case StatusSuccess:
		return 0
	case StatusRunError, StatusInstallError:
		return 1
	case StatusTimeout:
		return 124
	default:
		return 137
	}
}

// Stream names an output stream of a call.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Chunk is a piece of output in the order the call wrote it.
type Chunk struct {
	Stream Stream `json:"stream"`
	Text   string `json:"text"`
}

// Result is what a call produced. Output is already capped.
type Result struct {
	ID     string
	Status Status
	// Output holds stdout and stderr in the order written; Stdout and Stderr
	// hold each stream on its own. Each stream is cut at the pool's
	// MaxOutput with a visible marker.
	Output []Chunk
	Stdout string
	Stderr string
	// Value is the JSON text of the last expression; empty when it was None
	// or the call failed.
	Value string
	// Error is the Python traceback (pyrun's frames removed) or pyrun's
	// explanation of a timeout or crash.
	Error        string
	Dependencies []string
	Duration     time.Duration // the run itself, queue wait excluded
	// InWorker is the part of Duration inside the worker's Python helper,
	// as the worker measured it; zero when the worker did not answer.
	InWorker  time.Duration
	QueueWait time.Duration
	Worker    string
	// SessionID is the Python session the call ran in; empty for a
	// stateless call.
	SessionID string
	// Checkpoint, when set, says the session's worker was lost and the
	// session went back to its checkpoint (docs/sessions.md).
	Checkpoint *CheckpointRef

	// Displays are what the call showed (display(), the last expression's
	// rich form, matplotlib figures), in order; Files what it wrote under
	// /output/. DisplaysDropped and FilesDropped count those the caps held
	// back (MaxDisplays, MaxDisplayBytes; MaxFiles, MaxFileBytes).
	Displays        []Display
	Files           []OutputFile
	DisplaysDropped int
	FilesDropped    int
}

// Events receives a call's output while it runs. Methods are called from the
// goroutine running the call, in order; they must not block for long.
type Events interface {
	Output(c Chunk)
	// Package reports package loading messages.
	Package(text string)
}

// transcript keeps a call's capped output and forwards it to Events.
type transcript struct {
	max        int
	events     Events
	watch      Watcher // events, when it also watches; nil otherwise
	chunks     []Chunk
	tail       []byte
	tailStream Stream
	size       map[Stream]int
	cut        map[Stream]bool
	rich       richResults
}

func newTranscript(max int, ev Events) *transcript {
	t := &transcript{max: max, events: ev, size: map[Stream]int{}, cut: map[Stream]bool{}}
	t.watch, _ = ev.(Watcher)
	return t
}

// notice passes pyrun's word about the call to a Watcher.
func (t *transcript) notice(severe bool, format string, args ...any) {
	if t.watch != nil {
		t.watch.Notice(Notice{Severe: severe, Text: fmt.Sprintf(format, args...)})
	}
}

// truncationMarker is appended once to a stream that hit the limit.
func truncationMarker(s Stream, max int) string {
	return fmt.Sprintf("\n[pyrun: %s cut here: it exceeded the limit of %d bytes (max_output)]\n", s, max)
}

func (t *transcript) add(s Stream, text string) {
	if t.cut[s] || text == "" {
		return
	}
	if room := t.max - t.size[s]; len(text) > room {
		t.append(s, cutUTF8(text, room))
		t.dropped(s)
		return
	}
	t.append(s, text)
}

// dropped marks a stream as cut: the worker or add held output back.
func (t *transcript) dropped(s Stream) {
	if t.cut[s] {
		return
	}
	t.cut[s] = true
	t.append(s, truncationMarker(s, t.max))
	t.notice(false, "%s exceeded the limit of %d bytes (max_output); the rest of it is dropped", s, t.max)
}

func (t *transcript) append(s Stream, text string) {
	if text == "" {
		return
	}
	t.size[s] += len(text)
	if s != t.tailStream {
		t.flushTail()
		t.tailStream = s
	}
	t.tail = append(t.tail, text...)
	if t.events != nil {
		t.events.Output(Chunk{Stream: s, Text: text})
	}
}

// flushTail moves the run of output on one stream into chunks. Consecutive
// writes to one stream collect in tail so that many small writes cost
// amortised appends, not one string copy each.
func (t *transcript) flushTail() {
	if len(t.tail) > 0 {
		t.chunks = append(t.chunks, Chunk{Stream: t.tailStream, Text: string(t.tail)})
		t.tail = t.tail[:0]
	}
}

func (t *transcript) fill(r *Result) {
	t.flushTail()
	r.Output = t.chunks
	var out, errs []byte
	for _, c := range t.chunks {
		if c.Stream == Stdout {
			out = append(out, c.Text...)
		} else {
			errs = append(errs, c.Text...)
		}
	}
	r.Stdout, r.Stderr = string(out), string(errs)
	t.rich.fill(r)
	if err := t.rich.spoolErr; err != nil {
		t.notice(true, "an /output/ file was dropped: %v", err)
	}
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a character.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// capValue limits the JSON text of a return value to max bytes; cut says
// the worker already cut it. A value cut short is no longer JSON; it is
// returned as a JSON string with a marker so that the result stays parseable.
func capValue(v string, max int, cut bool) string {
	if len(v) <= max && !cut {
		return v
	}
	text := cutUTF8(v, max) + fmt.Sprintf("\n[pyrun: return value cut here: it exceeded the limit of %d bytes (max_output)]", max)
	b, _ := json.Marshal(text)
	return string(b)
}

// CheckpointRef names the checkpoint a session went back to: the state
// after its call number AfterCall, taken at Taken.
type CheckpointRef struct {
	AfterCall int       `json:"after_call"`
	Taken     time.Time `json:"taken"`
}

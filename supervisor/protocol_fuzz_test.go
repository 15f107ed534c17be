package supervisor_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// What a worker writes is untrusted: the parser must refuse anything that
// is not a protocol line with an error that says so, and never panic or
// hang. The seeds run in every test run; `go test -fuzz FuzzParseEvent
// ./supervisor/` explores further.

var eventSeeds = []string{
	`{"type":"ready","protocol":1,"pyodide":"314.0.7","python":"3.14.2","startup_ms":1998}`,
	`{"type":"output","id":"c1","stream":"stdout","text":"hi\n"}`,
	`{"type":"output","id":"c1","stream":"stdin","text":"hi\n"}`,
	`{"type":"result","id":"c1","status":"success","value":"42","duration_ms":2.2}`,
	`{"type":"result","id":"c1","status":"run-error","error":"Traceback","error_cut":true,"dropped":{"stdout":3}}`,
	`{"type":"result","id":"c1","status":"pwned"}`,
	`{"type":"result","id":"c1","status":"success","value":null,"dependencies":["numpy"],"recycle":"x"}`,
	`{"type":"package","id":"c1","text":"Loading numpy"}`,
	`{"type":"error","error":"bad request"}`,
	`{"type":"pong","id":"p1"}`,
	`{"type":"shell","cmd":"rm -rf /"}`,
	`{"type":1}`,
	`{"type":"result","id":{"nested":true},"status":"success"}`,
	`{"type":"output","id":"c1","stream":"stdout","text":"\ud800"}`,
	`{"type":"output","text":"` + strings.Repeat("x", 1000) + `"}`,
	`{"type":"result","dropped":{"stdout":-1},"status":"success"}`,
	`{"type":"result","status":"success","duration_ms":1e999}`,
	`[1,2,3]`,
	`null`,
	`"just a string"`,
	`{}`,
	`{"type":"ready"} {"type":"ready"}`,
	"\xff\xfe\x00garbage",
	``,
	`{`,
	strings.Repeat(`{"a":`, 10000) + strings.Repeat(`}`, 10000),
	`{"type":"` + strings.Repeat("t", 100000) + `"}`,
}

func FuzzParseEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		err := supervisor.ParseEvent(line)
		if err == nil {
			return
		}
		if !errors.Is(err, supervisor.ErrGarbage) {
			t.Errorf("error %v does not say the worker broke the protocol", err)
		}
		// It quotes at most 200 bytes of the line, each at most 4 bytes
		// escaped, and names at most 64 bytes of a field.
		if msg := err.Error(); len(msg) > 1200 {
			t.Errorf("error is %d bytes long; it quotes too much of the line", len(msg))
		}
	})
}

func FuzzEventReader(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s+"\n"), 4096)
	}
	f.Add([]byte(eventSeeds[0]+"\n"+eventSeeds[1]+"\n"+eventSeeds[3]+"\n"), 1<<20)
	f.Add([]byte(strings.Repeat("x", 100000)), 1024)
	f.Add([]byte(eventSeeds[1]+"\n"+strings.Repeat("y", 5000)+"\n"), 1024)
	f.Add([]byte(eventSeeds[1]), 1024) // no final newline
	f.Add([]byte("\n\n\n"), 16)
	f.Fuzz(func(t *testing.T, stream []byte, max int) {
		if max <= 0 || max > 1<<20 {
			return
		}
		done := make(chan struct{})
		var n int
		var err error
		go func() {
			defer close(done)
			n, err = supervisor.ReadEvents(bytes.NewReader(stream), max)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %d bytes did not end", len(stream))
		}
		if errors.Is(err, io.EOF) {
			if !bytes.HasSuffix(stream, []byte("\n")) && len(stream) > 0 {
				t.Errorf("a stream ending mid-line ended cleanly after %d events", n)
			}
			return
		}
		if !errors.Is(err, supervisor.ErrGarbage) {
			t.Errorf("error %v does not say the worker broke the protocol", err)
		}
		if n > bytes.Count(stream, []byte("\n")) {
			t.Errorf("%d events from %d lines", n, bytes.Count(stream, []byte("\n")))
		}
	})
}

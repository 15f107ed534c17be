package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// stdioPeer is a client on pyrun's stdio, served by runIO.
type stdioPeer struct {
	in  *io.PipeWriter
	out *bufio.Reader
}

func startStdio(t *testing.T, s *Server) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.runIO(ctx, inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		_, _ = io.Copy(io.Discard, outR)
		<-done
	})
	p := &stdioPeer{in: inW, out: bufio.NewReaderSize(outR, 1<<20)}
	p.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := p.recv(t); m["id"] != "init" {
		t.Fatalf("initialize: %v", m)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

func (p *stdioPeer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (p *stdioPeer) recv(t *testing.T) map[string]any {
	t.Helper()
	type answer struct {
		line []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := p.out.ReadBytes('\n')
		got <- answer{line, err}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("reading pyrun's answer: %v", a.err)
		}
		var m map[string]any
		if err := json.Unmarshal(a.line, &m); err != nil {
			t.Fatalf("answer %q: %v", a.line, err)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from pyrun within 10s")
		return nil
	}
}

// A request line over the stdio read limit is answered at once with the
// request's own id and a message naming the limit (it used to get id
// null, and its client waited for its own timeout). The id may come after
// the code; reading it keeps memory bounded: pyrun allocates nothing like
// the line's size. The next request is served as before.
func TestStdioLongLineAnsweredWithItsID(t *testing.T) {
	s := New(&jobRecorder{}, Options{MaxCode: 1 << 10}, testLogger(t))
	p := startStdio(t, s)
	const size = 48 << 20 // the limit is 4 MiB
	code := strings.Repeat("#", size)
	for _, tc := range []struct {
		line string
		id   any
	}{
		{`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"` + code + `"}}}`, 41.0},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"` + code + `"}},"id":"late-id"}`, "late-id"},
	} {
		line := []byte(tc.line + "\n")
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		go func() { _, _ = p.in.Write(line) }()
		m := p.recv(t)
		runtime.ReadMemStats(&after)
		if m["id"] != tc.id {
			t.Errorf("a %d MiB request with id %v was answered with id %v: %v", size>>20, tc.id, m["id"], m)
		}
		e, _ := m["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if !strings.Contains(msg, "4194304 bytes") || !strings.Contains(msg, "max_code") || !strings.Contains(msg, "tools/call") {
			t.Errorf("error message %q does not name the limit and the request", msg)
		}
		// The line is not kept: the reader's buffer and the first 4 MiB it
		// took in before it knew.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 24<<20 {
			t.Errorf("reading a %d MiB line allocated %d MiB", size>>20, grew>>20)
		}
	}
	if n := refusedCount(t, s, "stdio_max_line"); n != 2 {
		t.Errorf("pyrun_requests_refused_total{limit=stdio_max_line} is %v, want 2", n)
	}
	p.send(t, `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"1"}}}`)
	if m := p.recv(t); m["id"] != 42.0 || m["result"] == nil {
		t.Errorf("the call after the long lines: %v", m)
	}
	// A response too long for the limit (an id, no method) gets no answer:
	// the next answer is the next request's.
	lines := []byte(`{"jsonrpc":"2.0","id":5,"result":{"x":"` + strings.Repeat("r", 5<<20) + `"}}` + "\n" +
		`{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"1"}}}` + "\n")
	go func() { _, _ = p.in.Write(lines) }() // while the answers are read
	if m := p.recv(t); m["id"] != 43.0 || m["result"] == nil {
		t.Errorf("after a long response, the next answer: %v", m)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/internal/testproc"
	"github.com/pyrun/pyrun/mcp/mcptest"
)

// rawStdio is `pyrun stdio` driven line by line, without an MCP client, so
// tests can send what no client would and stop reading at will.
type rawStdio struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	log *logWatcher
}

func startRawStdio(t *testing.T, args ...string) *rawStdio {
	t.Helper()
	needBinary(t)
	lw := newLogWatcher()
	cmd := exec.Command(pyrunBin, append([]string{"stdio", "--log-format", "json", "--log-level", "debug"}, args...)...)
	cmd.Stderr = lw
	in, out := testproc.StartPiped(t, cmd)
	s := &rawStdio{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), log: lw}
	t.Cleanup(func() {
		_ = in.Close()
		go func() { _, _ = io.Copy(io.Discard, s.out) }() // a parent hangs up by closing both
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("pyrun stdio did not exit within 60s of its stdin closing")
		}
		if t.Failed() {
			t.Logf("pyrun's stderr (last lines):\n%s", lw.tail())
		}
	})
	s.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := s.recv(t); m["id"] != "init" || m["result"] == nil {
		t.Fatalf("initialize answered %v", m)
	}
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawStdio) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		t.Fatalf("write to pyrun's stdin: %v", err)
	}
}

// recv reads one message; it fails the test when none comes in time.
func (s *rawStdio) recv(t *testing.T) map[string]any {
	t.Helper()
	type got struct {
		line string
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		line, err := s.out.ReadString('\n')
		ch <- got{line, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatalf("read pyrun's stdout: %v", g.err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(g.line), &m); err != nil {
			t.Fatalf("pyrun wrote %q: %v", g.line, err)
		}
		return m
	case <-time.After(callTimeout):
		t.Fatalf("no message from pyrun within %s", callTimeout)
	}
	return nil
}

// callLine is a tools/call request of run_python_code with code.
var callLine = mcptest.CallBody

// A line that is not JSON-RPC gets its JSON-RPC error and pyrun goes on:
// calls sent before and after it are answered. (It used to end pyrun with
// status 3 and lose the calls in flight.)
func TestStdioBadLineKeepsServing(t *testing.T) {
	s := startRawStdio(t, "--workers", "1")
	s.send(t, callLine(1, "import asyncio\nawait asyncio.sleep(0.5)\n'before'"))
	for _, bad := range []string{`this is not json`, `{}`, `{"id":5,"method":"x"}`, `[]`, `[1]`} {
		s.send(t, bad)
	}
	s.send(t, callLine(2, "'after'"))
	errs := map[float64]int{}
	results := map[float64]string{}
	for len(results) < 2 {
		m := s.recv(t)
		if e, ok := m["error"].(map[string]any); ok {
			errs[e["code"].(float64)]++
			if m["id"] != nil && m["id"] != 5.0 {
				t.Errorf("error answer %v: want id null, or 5 where the line had it", m)
			}
			if _, ok := m["id"]; !ok {
				t.Errorf("error answer %v has no id: JSON-RPC wants null", m)
			}
			continue
		}
		id, _ := m["id"].(float64)
		text := fmt.Sprint(m["result"])
		results[id] = text
	}
	if errs[-32700] != 1 || errs[-32600] != 4 {
		t.Errorf("error answers by code: %v, want one -32700 (not JSON) and four -32600 (not JSON-RPC)", errs)
	}
	for id, want := range map[float64]string{1: "before", 2: "after"} {
		if !strings.Contains(results[id], want) || !strings.Contains(results[id], "success") {
			t.Errorf("call %v: %s, want success with %q", id, clipText(results[id]), want)
		}
	}
}

// rss is a process's resident memory in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := procfs.Status(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A parent that stops reading stdout stops pyrun reading stdin once a
// result finds the session's backlog full: pyrun's memory
// stays bounded (it grew to 974 MiB), and every call is answered once the
// parent reads again.
func TestStdioStalledParentIsBounded(t *testing.T) {
	s := startRawStdio(t, "--workers", "1")
	before := rss(t, s.cmd.Process.Pid)
	const calls = 3000
	code := "print('<' * 60000)" // a result of about 1 MiB as JSON
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range calls {
			if _, err := io.WriteString(s.in, callLine(i, code)+"\n"); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*callTimeout)
	defer cancel()
	msg := "not reading requests until the client reads the results written to it"
	if err := s.log.waitFor(ctx, "pyrun to stop reading", func(c map[string]int) bool { return c[msg] > 0 }); err != nil {
		t.Fatal(err)
	}
	held := rss(t, s.cmd.Process.Pid)
	t.Logf("pyrun's RSS: %d MiB before, %d MiB with the parent not reading (%d calls sent)", before>>20, held>>20, calls)
	if held-before > 96<<20 {
		t.Errorf("pyrun's RSS grew by %d MiB while its parent did not read; want at most 96 MiB (the 8 MiB backlog and what runs)", (held-before)>>20)
	}
	// Reading again, every call is answered: a result, or an error that
	// says the client was not reading.
	answered, full, heldBack := 0, 0, 0
	for answered < calls {
		m := s.recv(t)
		if _, ok := m["id"]; !ok {
			continue // a notification
		}
		answered++
		text := fmt.Sprint(m["result"])
		switch {
		case strings.Contains(text, strings.Repeat("<", 60000)) || strings.Contains(text, strings.Repeat("&lt;", 60000)):
			full++
		case strings.Contains(text, "not reading its results"):
			heldBack++
		}
	}
	<-sent
	if full == 0 || heldBack == 0 {
		t.Errorf("of %d answers, %d full results and %d held back; want some of each", answered, full, heldBack)
	}
}

package main

// End-to-end tests of R: `pyrun stdio --languages python,r` with a real
// go-sdk client and real webR workers (run_r_code absent with the language
// off is TestLanguagesPythonOnly's).

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/mcptest"
)

func TestRTool(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.csv"), []byte("n\n1\n2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newLanguageServer(t, "python,r", "--workers", "1", "--r-workers", "1", "--mount", ro+":/data", "--mount", rw+":/shared/out:rw")
	if got := mcptest.ToolNames(t, s.session); !slices.Equal(got, []string{"run_python_code", "run_r_code"}) {
		t.Fatalf("tools %v, want run_python_code and run_r_code", got)
	}

	t.Run("print and value", func(t *testing.T) {
		r := s.runIn(t, "run_r_code", "r_code", "print('hi')\nmessage('note')\nx <- c(a = 1, b = 2)\nx * 21")
		wantValue(t, r, `{"a":21,"b":42}`)
		if !strings.Contains(r.sc.Stdout, `[1] "hi"`) || r.sc.Stderr != "note\n" {
			t.Errorf("stdout %q, stderr %q", r.sc.Stdout, r.sc.Stderr)
		}
		r = s.runIn(t, "run_r_code", "r_code", "data.frame(n = 1:2, s = c('a', 'b'))")
		wantValue(t, r, `[{"n":1,"s":"a"},{"n":2,"s":"b"}]`)
		// Python still answers beside R.
		wantValue(t, s.runIn(t, "run_python_code", "python_code", "6 * 7"), "42")
	})

	t.Run("error", func(t *testing.T) {
		r := s.runIn(t, "run_r_code", "r_code", "f <- function(x) stop('bad x: ', x)\nf(3)")
		wantStatus(t, r, "run-error")
		if r.sc.Error == nil || !strings.Contains(*r.sc.Error, "Error in f(3) : bad x: 3") || r.sc.ExitCode != 1 {
			t.Errorf("error %v, exit code %d", r.sc.Error, r.sc.ExitCode)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		began := time.Now()
		r, err := s.callTool(t.Context(), "run_r_code", map[string]any{"r_code": "while (TRUE) {}", "timeout_seconds": 2})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "timeout")
		if d := time.Since(began); d > 60*time.Second {
			t.Errorf("the busy loop ended after %s", d)
		}
		wantValue(t, s.runIn(t, "run_r_code", "r_code", "exists('x')"), "false")
	})

	t.Run("plot as image", func(t *testing.T) {
		r := s.runIn(t, "run_r_code", "r_code", "plot(1:10, main = 'ten')")
		wantStatus(t, r, "success")
		var img *sdk.ImageContent
		for _, c := range r.rest {
			if i, ok := c.(*sdk.ImageContent); ok {
				img = i
			}
		}
		if img == nil || img.MIMEType != "image/png" {
			t.Fatalf("no image/png block after the text: %+v", r.rest)
		}
		data := img.Data
		if dec, err := base64.StdEncoding.DecodeString(string(data)); err == nil {
			data = dec // a client that kept the base64 text
		}
		if _, err := png.Decode(bytes.NewReader(data)); err != nil {
			t.Errorf("the image is not a PNG: %v", err)
		}
	})

	t.Run("mounts", func(t *testing.T) {
		// A read-only mount is readable and refuses a write with R's own
		// error; a :rw one takes writes that reach the host and outlast a
		// stateless call's reset.
		r := s.runIn(t, "run_r_code", "r_code", `d <- read.csv("/data/in.csv")
refused <- tryCatch({ writeLines("no", "/data/x.txt"); "written" }, warning = function(w) conditionMessage(w))
writeLines("from R", "/shared/out/r.txt")
list(n = sum(d$n), refused = refused, files = list.files("/data"))`)
		wantValue(t, r, `{"n":3,"refused":"cannot open file '/data/x.txt': Permission denied","files":"in.csv"}`)
		if _, err := os.Stat(filepath.Join(ro, "x.txt")); err == nil {
			t.Error("the read-only mount was written")
		}
		if b, err := os.ReadFile(filepath.Join(rw, "r.txt")); err != nil || string(b) != "from R\n" {
			t.Errorf("the :rw mount holds %q (%v), want R's line", b, err)
		}
		// The reset after a stateless call empties R's home and /tmp: a
		// link from there into the :rw mount goes, what it points at stays.
		wantValue(t, s.runIn(t, "run_r_code", "r_code", `c(file.symlink("/shared/out", "link"), file.symlink("/shared/out", file.path(tempdir(), "link")))`), "[true,true]")
		wantValue(t, s.runIn(t, "run_r_code", "r_code", `c(file.exists("link"), readLines("/shared/out/r.txt"))`), `["FALSE","from R"]`)
		if d := s.toolDescription(t, "run_r_code"); !strings.Contains(d, "mounted read-only (unless marked writable) at: /data, /shared/out (writable)") {
			t.Errorf("run_r_code's description does not name the mounts:\n%s", d)
		}
	})

	t.Run("session", func(t *testing.T) {
		r, err := s.callTool(t.Context(), "run_r_code", map[string]any{"r_code": "x <- 41; library(stats4)", "session_id": "new"})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		id := r.sc.SessionID
		if id == "" {
			t.Fatalf("no session id: %s", r.text)
		}
		r, err = s.callTool(t.Context(), "run_r_code", map[string]any{"r_code": "c(x + 1, 'package:stats4' %in% search())", "session_id": id})
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, r, "[42,1]")
		// An R session is not Python's.
		res, err := s.callToolRaw(t.Context(), "run_python_code", map[string]any{"python_code": "1", "session_id": id})
		if err == nil && !res.IsError {
			t.Errorf("run_python_code took R's session %s", id)
		}
		// A stateless call does not see it.
		wantValue(t, s.runIn(t, "run_r_code", "r_code", "exists('x')"), "false")
	})

	t.Run("out of memory", func(t *testing.T) {
		// A session's call that fills R's heap (pyodide-host's
		// TestROutOfMemoryUnreported has the worker's side: R left without
		// room even to report its error once failed the call as a host
		// failure) is a memory-error whose answer says the session is lost
		// with its worker; the pool's R and Python answer meanwhile.
		r, err := s.callTool(t.Context(), "run_r_code", map[string]any{"session_id": "new", "r_code": "big <- list()\n" +
			"tryCatch(repeat big[[length(big) + 1]] <- numeric(1e6), error = function(e) NULL)\nx <- NULL; repeat x <- list(x)"})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "memory-error")
		if r.sc.Error == nil || !strings.Contains(*r.sc.Error, "ended because its worker was lost (it ran out of memory)") {
			t.Errorf("the session's out-of-memory error: %v, want it to say the session was lost", r.sc.Error)
		}
		res, err := s.callToolRaw(t.Context(), "run_r_code", map[string]any{"r_code": "1", "session_id": r.sc.SessionID})
		if err == nil && !res.IsError {
			t.Errorf("session %s answered after it was lost", r.sc.SessionID)
		}
		wantValue(t, s.runIn(t, "run_r_code", "r_code", "1 + 1"), "2")
		wantValue(t, s.runIn(t, "run_python_code", "python_code", "6 * 7"), "42")
	})
}

// TestRLive: R's output reaches the client as log messages while the call
// runs (docs/contract.md section 7), as Python's does: the lines a call writes
// before it sleeps for ten minutes arrive, stdout at info and stderr at
// warning, in order, while it sleeps; the client then cancels it and the
// same worker, interrupted, serves the next call.
func TestRLive(t *testing.T) {
	needBinary(t)
	n := newNotes()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServerAt(ctx, sessionRevision, n.clientOptions(),
		"--languages", "python,r", "--workers", "1", "--r-workers", "1")
	if err != nil {
		t.Fatal(err)
	}
	s.closeWithTest(t)
	s.setLevel(t, "debug")
	wantValue(t, s.runIn(t, "run_r_code", "r_code", "1"), "1") // R is up

	callCtx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		p := &sdk.CallToolParams{Name: "run_r_code", Arguments: map[string]any{
			"r_code": "cat('early\\n'); message('note'); cat('more\\n'); Sys.sleep(600); cat('late\\n')",
		}}
		p.SetProgressToken("r-live")
		_, err := s.session.CallTool(callCtx, p)
		done <- err
	}()
	logs := n.waitLogs(t, "r-live", "the call's first lines", hasStream("stdout", "more"))
	select {
	case err := <-done:
		t.Fatalf("the call returned (%v) before its lines arrived; they must come while it sleeps", err)
	default:
	}
	var got []string
	for _, l := range logs {
		got = append(got, l.level+" "+l.data.Stream+" "+l.data.Text)
	}
	want := []string{"info stdout early\n", "warning stderr note\n", "info stdout more\n"}
	if !slices.Equal(got, want) {
		t.Errorf("log messages %q, want %q", got, want)
	}
	stop()
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error to its client")
	}
	r := s.runIn(t, "run_r_code", "r_code", "cat('after\\n')")
	wantStatus(t, r, "success")
	if r.sc.Stdout != "after\n" {
		t.Errorf("after the cancel: stdout %q", r.sc.Stdout)
	}
	if got := s.log.count("retiring worker"); got != 0 {
		t.Errorf("%d workers retired; the interrupt should have stopped the call", got)
	}
}

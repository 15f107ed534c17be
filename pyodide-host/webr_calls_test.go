package pyodidehost_test

// An R call's value, output, errors and interrupts (webr/main.ts and
// pyrun.R's run()); the worker harness is webr_test.go's.

import (
	"encoding/json"
	"io"
	"testing"
	"time"
)

// The value of the last visible expression, as JSON, in the forms that
// docs/protocol.md's "Engines: R" lists.
func TestRValueForms(t *testing.T) {
	w := startR(t, rConfig)
	for _, tc := range []struct{ code, want string }{
		{"1 + 1", `2`},
		{"5L", `5`},
		{"'naïve ✓'", `"naïve ✓"`},
		{"TRUE", `true`},
		{"c(1.5, 2, NA)", `[1.5,2,null]`},
		{"c(a = 1, b = 2)", `{"a":1,"b":2}`},
		{"c(Inf, -Inf, NaN)", `["Infinity","-Infinity",null]`},
		{"NA", `null`},
		{"character(0)", `[]`},
		{"list(1, 'two', NULL)", `[1,"two",null]`},
		{"list(a = 1, b = list(c = 'x'))", `{"a":1,"b":{"c":"x"}}`},
		{"data.frame(x = 1:2, y = c('a', 'b'))", `[{"x":1,"y":"a"},{"x":2,"y":"b"}]`},
		{"factor(c('lo', 'hi', 'lo'))", `["lo","hi","lo"]`},
		{"as.Date('2024-02-29')", `"2024-02-29"`},
		{"as.POSIXct('2024-02-29 12:30:00', tz = 'UTC')", `"2024-02-29T12:30:00Z"`},
		{"matrix(1:4, nrow = 2)", `[[1,3],[2,4]]`},
		{"1+2i", `"1+2i"`},
		{"as.raw(c(1, 255))", `[1,255]`},
	} {
		r := wantSuccess(t, w.run(tc.code, nil), tc.code)
		if r.Value == nil {
			t.Errorf("%s: no value, want %s", tc.code, tc.want)
			continue
		}
		if got := compactJSON(t, *r.Value); got != tc.want {
			t.Errorf("%s: value %s, want %s", tc.code, got, tc.want)
		}
	}
	// No value: NULL, an invisible value, an assignment.
	for _, code := range []string{"NULL", "invisible(3)", "x <- 5", "f <- function() 1"} {
		if r := wantSuccess(t, w.run(code, nil), code); r.Value != nil {
			t.Errorf("%s: value %s, want none", code, *r.Value)
		}
	}
}

func TestRPrintStreamsWarningsMessagesInOrder(t *testing.T) {
	w := startR(t, rConfig)
	evs := w.run("print('hi')\ncat('to stderr\\n', file = stderr())\nmessage('a message')\n"+
		"x <- log(-1)\nwarning('careful')\nf <- function() warning('inside')\nf()\n1 + 1", nil)
	r := wantSuccess(t, evs, "streams")
	want := "stdout: [1] \"hi\"\n" +
		"stderr: to stderr\na message\nWarning in log(-1) : NaNs produced\nWarning: careful\nWarning in f() : inside\n" +
		"stdout: [1] 2\n"
	if got := output(evs, ""); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if r.Value == nil || *r.Value != "2" {
		t.Errorf("value %v, want 2", r.Value)
	}
	// Autoprint as at R's console: every visible top-level value is printed.
	evs = w.run("3\ninvisible(4)\ndata.frame(n = 1:2)", nil)
	if got, want := output(evs, "stdout"), "[1] 3\n  n\n1 1\n2 2\n"; got != want {
		t.Errorf("autoprint output %q, want %q", got, want)
	}
	// A call with options(warn = -1) says nothing of its warnings.
	evs = w.run("options(warn = -1); log(-1)", nil)
	if got := output(evs, "stderr"); got != "" {
		t.Errorf("warn = -1: stderr %q, want none", got)
	}
}

// R's lines are output events as R writes them, while the call runs: the
// first ones come before the call ends (it would sleep ten minutes; SIGUSR2
// ends it once they are in), in the order written across the streams. A
// text left without a newline ends its call's output, with one, and does
// not start the next call's.
func TestRLiveOutput(t *testing.T) {
	w := startR(t, rConfig)
	line := w.request("cat('early\\n'); message('note'); cat('partial'); Sys.sleep(600)", nil)
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	var evs []rEvent
	for output(evs, "") != "stdout: early\nstderr: note\n" {
		var ev rEvent
		raw := w.next(requestTimeout, "the call's first lines")
		if err := json.Unmarshal([]byte(raw), &ev); err != nil || ev.Type != "output" {
			t.Fatalf("while the call sleeps: %q; want its first lines as output events, got so far %q", raw, output(evs, ""))
		}
		evs = append(evs, ev)
	}
	evs = append(evs, w.answer(line, true)...)
	if r := result(t, evs); r.Status != "interrupted" {
		t.Fatalf("status %q (%s), want interrupted", r.Status, r.Error)
	}
	if got, want := output(evs, ""), "stdout: early\nstderr: note\nstdout: partial\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	for _, tc := range []struct{ code, want string }{
		{"cat('next\\n')", "stdout: next\n"},
		{"cat('a'); cat('b', file = stderr())", "stdout: a\nstderr: b\n"},
		{"cat('c\\n'); message('d')", "stdout: c\nstderr: d\n"},
		{"cat('é ü 漢 ✓\\n')", "stdout: é ü 漢 ✓\n"}, // a line is decoded whole
	} {
		if got := output(w.run(tc.code, nil), ""); got != tc.want {
			t.Errorf("%s: output %q, want %q", tc.code, got, tc.want)
		}
	}
}

func TestRErrors(t *testing.T) {
	w := startR(t, rConfig)
	for _, tc := range []struct{ code, want, out string }{
		{"stop('boom')", "Error: boom", ""},
		{"f <- function(x) stop('bad x: ', x)\nf(3)", "Error in f(3) : bad x: 3", ""},
		{"print('before')\nundefined_thing", "Error: object 'undefined_thing' not found", "[1] \"before\"\n"},
		{"a b", "Error: <text>:1:3: unexpected symbol\n1: a b\n      ^", ""},
		{"log('a')", "Error in log(\"a\") : non-numeric argument to mathematical function", ""},
	} {
		evs := w.run(tc.code, nil)
		r := result(t, evs)
		if r.Status != "run-error" || r.Error != tc.want {
			t.Errorf("%q: %s %q, want run-error %q", tc.code, r.Status, r.Error, tc.want)
		}
		if got := output(evs, "stdout"); got != tc.out {
			t.Errorf("%q: stdout %q, want %q (output before the error is kept)", tc.code, got, tc.out)
		}
	}
	wantSuccess(t, w.run("1", nil), "after errors")
}

// A busy loop and a sleep are stopped by SIGUSR2 (webR.interrupt()), and
// the same R serves the next call; a signal while no call runs is ignored.
func TestRInterrupt(t *testing.T) {
	w := startR(t, rConfig)
	for _, code := range []string{"while (TRUE) {}", "Sys.sleep(600)", "repeat x <- sum(runif(100))"} {
		began := time.Now()
		r := result(t, w.interrupt(code, nil))
		if r.Status != "interrupted" {
			t.Fatalf("%s: status %q (%s), want interrupted", code, r.Status, r.Error)
		}
		if d := time.Since(began); d > 30*time.Second {
			t.Errorf("%s: interrupted after %s", code, d)
		}
		r = wantSuccess(t, w.run("1 + 1", nil), "after "+code)
		if r.Value == nil || *r.Value != "2" {
			t.Errorf("after the interrupt: value %v, want 2", r.Value)
		}
	}
	// A signal between calls (as one that arrives after its call ended) is
	// stale for the next call, which carries the count.
	w.signal()
	r := wantSuccess(t, w.run("Sys.sleep(0.5); 3", nil), "after a stale signal")
	if r.Value == nil || *r.Value != "3" {
		t.Errorf("after a stale signal: value %v, want 3", r.Value)
	}
}

// Many signals for one call (the supervisor repeats SIGUSR2 until the
// result comes, and R can be slow to stop under load) interrupt it once:
// the rest must not stay queued in webR and end the worker's clean-up.
func TestRInterruptBurst(t *testing.T) {
	w := startR(t, rConfig)
	for round := range 2 {
		line := w.request("Sys.sleep(600)", nil)
		if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
			t.Fatalf("write request: %v", err)
		}
		tick := time.NewTicker(5 * time.Millisecond)
		timeout := time.After(requestTimeout)
		var res rEvent
		for res.Type != "result" {
			select {
			case <-tick.C:
				w.signal()
			case <-timeout:
				t.Fatalf("no answer after %s to %s\nstderr:\n%s", requestTimeout, line, w.stderr.String())
			case l, ok := <-w.lines:
				if !ok {
					t.Fatalf("round %d: R worker stdout ended while being interrupted\nstderr:\n%s", round, w.stderr.String())
				}
				res = rEvent{}
				if err := json.Unmarshal([]byte(l), &res); err != nil {
					t.Fatalf("R worker wrote a line that is not an event: %q", l)
				}
			}
		}
		tick.Stop()
		if res.Status != "interrupted" {
			t.Fatalf("round %d: status %q (%s), want interrupted", round, res.Status, res.Error)
		}
		// A few more signals land as the call ends, as the supervisor's can.
		for range 5 {
			w.signal()
		}
		r := wantSuccess(t, w.run("1 + 1", nil), "after a burst of signals")
		if r.Value == nil || *r.Value != "2" {
			t.Errorf("round %d: after the burst: value %v, want 2", round, r.Value)
		}
	}
}

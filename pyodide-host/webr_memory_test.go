package pyodidehost_test

// R past its memory: heap_limit and what the worker answers then.

import (
	"strings"
	"testing"
)

// heap_limit bounds the worker: an allocation that would take it past is
// a memory-error (with recycle) and R, unharmed, serves the next call.
// The limit is the supervisor's for R's default 1 GiB, less 96 MiB.
func TestRMemoryLimit(t *testing.T) {
	w := startR(t, `{"heap_limit":973078528,"max_line":67108864}`)
	// More than 32-bit R can index is R's own error, before it allocates
	// anything: a run-error, and the worker goes on.
	r := result(t, w.run("x <- numeric(1e10)", nil))
	if r.Status != "run-error" || !strings.Contains(r.Error, "vector size specified is too large") || w.recycle != "" {
		t.Errorf("numeric(1e10): %s %q, idle recycle %q; want R's run-error, no recycle", r.Status, r.Error, w.recycle)
	}
	r = result(t, w.run("x <- numeric(1e8); length(x)", nil)) // 800 MB
	if r.Status != "memory-error" || !strings.Contains(r.Error, "cannot allocate") || r.Recycle == "" {
		t.Errorf("past the cap: %s %q recycle %q, want memory-error with recycle", r.Status, r.Error, r.Recycle)
	}
	if r := wantSuccess(t, w.run("length(numeric(1e7))", nil), "after"); r.Value == nil || *r.Value != "10000000" {
		t.Errorf("after the memory error: %v", r.Value)
	}
}

// R can run so far out of memory that pyrun.R's run() cannot report the
// error: its handler cannot allocate the error's text, and webR's handler
// around run() prints it and returns NULL; or no handler can run, and R's
// top level prints "memory exhausted" and jumps out of webR's request. The
// worker once read NULL as run()'s list ("Cannot read properties of null
// (reading 'rich')", a host failure, then exit 70 in the clean-up) and the
// jump as an interrupt. Either is a memory-error that says R ran out of
// memory, with recycle, and the worker, whose R still holds what the call
// made, takes no other call. heap_limit 100 MiB caps R's heap at its
// floor (64 MiB more than at start): the heap fills in a second or two.
func TestROutOfMemoryUnreported(t *testing.T) {
	const small = `{"heap_limit":104857600,"max_line":67108864`
	for _, tc := range []struct{ name, config, code, said string }{
		{"handler", small + "}", "x <- NULL; repeat x <- list(x)", "could not allocate memory"},
		// A session's call too: its worker is lost with the session.
		{"top level", small + `,"session":true}`,
			"big <- list(); tryCatch(repeat big[[length(big) + 1]] <- numeric(1e6), error = function(e) NULL)\n" +
				"x <- NULL; repeat x <- list(x)", "memory exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := startR(t, tc.config)
			// The call comes first: where R fails depends on what its
			// heap holds.
			r := result(t, w.run(tc.code, nil))
			if r.Status != "memory-error" || !strings.HasPrefix(r.Error, "Error: R ran out of memory (") ||
				!strings.Contains(r.Error, tc.said) || r.Recycle != "the call ran out of memory" {
				t.Errorf("past the heap: %s %q recycle %q; want memory-error, R ran out of memory (%s...), with recycle",
					r.Status, r.Error, r.Recycle, tc.said)
			}
			if w.recycle != r.Recycle {
				t.Errorf("idle recycle %q, want the result's", w.recycle)
			}
			evs := w.run("1 + 1", nil)
			if last := evs[len(evs)-1]; last.Type != "error" || !strings.Contains(last.Error, "this worker must be replaced") {
				t.Errorf("a call after: %+v, want it refused", last)
			}
		})
	}
}

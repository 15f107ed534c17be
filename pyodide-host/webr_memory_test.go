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
	r := result(t, w.run("x <- numeric(1e8); length(x)", nil)) // 800 MB
	if r.Status != "memory-error" || !strings.Contains(r.Error, "cannot allocate") || r.Recycle == "" {
		t.Errorf("past the cap: %s %q recycle %q, want memory-error with recycle", r.Status, r.Error, r.Recycle)
	}
	if r := wantSuccess(t, w.run("length(numeric(1e7))", nil), "after"); r.Value == nil || *r.Value != "10000000" {
		t.Errorf("after the memory error: %v", r.Value)
	}
}

// Package testlog gives a test a logger, or a plain writer, that writes to
// the test's own log, shown when it fails or runs with -v.
package testlog

import (
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// New is a debug-level logger named after t that writes to t's log.
func New(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: writer{t}})
}

// Writer writes to t's log, a t.Log a Write (without its last newline):
// for a logger of another name or level, or a script's progress output.
func Writer(t testing.TB) io.Writer { return writer{t} }

type writer struct{ t testing.TB }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

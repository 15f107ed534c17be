// Package testproc starts the child processes tests talk to over their
// stdin and stdout: pyrun stdio, a worker, a helper run as another user.
package testproc

import (
	"io"
	"os/exec"
	"testing"
)

// StartPiped starts cmd with a pipe to its stdin and one from its stdout
// (its stderr is what the caller set), failing t if it cannot. Waiting for
// cmd stays the caller's: it knows when the child should end.
func StartPiped(t testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	return stdin, stdout
}

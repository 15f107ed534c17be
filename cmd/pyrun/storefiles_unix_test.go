//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe in the dir: store where a session's record would be is
// refused, not waited on: pyrun starts (its start lists the store's
// sessions, and a plain open of the pipe waited for a writer for good), a
// call for that session's id answers at once, and new sessions work.
func TestStoreWithANamedPipeStarts(t *testing.T) {
	needBinary(t)
	store := t.TempDir()
	id := "box-9." + strings.Repeat("ab", 16)
	fifo := filepath.Join(store, id+".ckpt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // frees a reader that waits on it
		if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
	s := newServer(t, "--workers", "1", "--session-worker", "own", "--session-store", "dir:"+store, "--instance-id", "box-9")
	if r := s.inSession(t, "new", "6 * 7"); r.sc.Status != "success" || valueOf(r) != "42" {
		t.Fatalf("a new session: %s %s\n%s", r.sc.Status, valueOf(r), r.text)
	}
	if st, err := os.Stat(filepath.Join(store, ".key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the store's own key: %v %v, want a file only pyrun's user reads", st, err)
	}
	began := time.Now()
	r, err := s.call(t.Context(), map[string]any{"python_code": "1", "session_id": id})
	if err == nil {
		err = fmt.Errorf("%s", r.text)
	}
	if !strings.Contains(err.Error(), "is a named pipe, not a regular file") || time.Since(began) > 30*time.Second {
		t.Errorf("a call for the pipe's session id: %v after %s, want an error at once saying it is a named pipe", err, time.Since(began))
	}
}

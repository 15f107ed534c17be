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

// storeKeyFile is a --session-store-key-file for the test.
func storeKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store-key")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789abcdef", 4)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

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

// A redis:// store needs a key file, the same in every instance that
// shares it: without one pyrun refuses to start, and says what to give.
// A dir: store does without (it makes its own).
func TestRedisStoreNeedsAKeyFile(t *testing.T) {
	_, _, err := loadOptions("serve", []string{"--session-store", "redis://127.0.0.1:6379/0"})
	if err == nil || !strings.Contains(err.Error(), "needs --session-store-key-file") || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("a redis store without a key file: %v", err)
	}
	if _, _, err := loadOptions("serve", []string{"--session-store", "redis://127.0.0.1:6379/0", "--session-store-key-file", "/run/secrets/key"}); err != nil {
		t.Errorf("with a key file: %v", err)
	}
	if _, _, err := loadOptions("serve", []string{"--session-store", "dir:" + t.TempDir()}); err != nil {
		t.Errorf("a dir: store without a key file: %v", err)
	}
}

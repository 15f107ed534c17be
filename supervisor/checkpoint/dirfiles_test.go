//go:build !windows

// Named pipes and symbolic links put in a store's folder: Unix attacks.

package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a named pipe at path, and frees at the test's end any
// reader it holds (a write end opened and closed gives it EOF).
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
}

// within runs f, and fails the test if it has not returned after limit.
func within(t *testing.T, what string, limit time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still waiting after %s", what, limit)
	}
}

// The dir: store reads regular files only, each within its bound: a named
// pipe where a record or a lease should be (whose plain open waits for a
// writer for good: it hung pyrun's start), a symbolic link, and a file
// larger than any record are refused at once, and leave the store's other
// sessions usable.
func TestDirReadsOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenDir(dir, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k, _ := keepTwoCalls(t, ctx, store) // box.1, intact
	mkfifo(t, filepath.Join(dir, "box.2.ckpt"))
	if err := os.Symlink(filepath.Join(dir, "box.1.ckpt"), filepath.Join(dir, "box.3.ckpt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "box.4.ckpt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "box.4.ckpt"), MaxRecord(32<<20)+1); err != nil { // sparse
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(dir, "box.5.lease"))

	within(t, "listing the sessions (as pyrun's start does)", 10*time.Second, func() {
		saved, err := k.List(ctx)
		if err != nil || len(saved) != 1 || saved[0].ID != "box.1" {
			t.Errorf("list: %+v %v, want box.1 alone", saved, err)
		}
	})
	for id, want := range map[string]string{"box.2": "not a regular file", "box.3": "symbolic link", "box.4": "past the"} {
		within(t, "restoring "+id, 10*time.Second, func() {
			if _, _, err := k.Load(ctx, id); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
				t.Errorf("load %s: %v, want ErrCorrupt saying %q", id, err, want)
			}
		})
	}
	within(t, "taking a lease whose file is a named pipe", 10*time.Second, func() {
		if _, err := store.Acquire(ctx, "box.5", "test", time.Minute); err != nil {
			t.Errorf("acquire box.5: %v", err)
		}
	})
	if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 2 {
		t.Errorf("the intact session beside them: %+v %v", m, err)
	}
}

// A key file that is a named pipe is refused, not waited on.
func TestKeyFileThatIsANamedPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	mkfifo(t, fifo)
	within(t, "reading a key file that is a named pipe", 10*time.Second, func() {
		if _, err := ReadKeyFile(fifo); err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("a named pipe as key file: %v", err)
		}
	})
}

package outputs

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// data is a Source of bytes held in memory, for the tests.
type data []byte

func (d data) Size() int64 { return int64(len(d)) }

func (d data) MoveTo(dst string) error { return os.WriteFile(dst, d, 0o600) }

// get reads a file of the store.
func get(s *Store, owner, uri string) (string, []byte, error) {
	mime, f, size, err := s.Get(owner, uri)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err == nil && int64(len(b)) != size {
		err = errors.New("size mismatch")
	}
	return mime, b, err
}

// filesIn counts the files in dir.
func filesIn(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestStoreBounds(t *testing.T) {
	dir := t.TempDir()
	s := New(Config{TTL: time.Minute, MaxBytes: 10, MaxFiles: 3, Dir: dir})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	s.Put("a", "u1", "text/plain", data("1234"))
	s.Put("a", "u2", "text/plain", data("5678"))
	if _, b, err := get(s, "a", "u1"); err != nil || string(b) != "1234" {
		t.Fatalf("get u1: %q %v", b, err)
	}
	// 4+4+4 > 10: the oldest goes.
	s.Put("a", "u3", "text/plain", data("9abc"))
	if _, _, err := get(s, "a", "u1"); !errors.Is(err, ErrDropped) {
		t.Errorf("u1 after a put over the byte bound: %v, want ErrDropped", err)
	}
	// The file bound: three files of one byte each, then a fourth.
	s.Put("a", "u4", "", data("x"))
	s.Put("a", "u5", "", data("y"))
	if n, b := s.Len(); n != 3 || b != 6 {
		t.Errorf("held %d files, %d bytes; want 3, 6", n, b)
	}
	// They are files in the store's folder, and nothing else is.
	if n := filesIn(t, dir); n != 3 {
		t.Errorf("%d files in the store's folder, want 3", n)
	}
	if _, _, err := get(s, "a", "u2"); !errors.Is(err, ErrDropped) {
		t.Errorf("u2 after a put over the file bound: %v", err)
	}
	// Another owner's read is a read of an unknown URI.
	if _, _, err := get(s, "b", "u5"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's read: %v, want ErrNotFound", err)
	}
	if _, _, err := get(s, "a", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	// Larger than the whole store: not kept.
	if s.Put("a", "big", "", make(data, 11)) {
		t.Error("a file larger than the store was kept")
	}
	// Expiry.
	now = now.Add(time.Minute)
	if _, _, err := get(s, "a", "u5"); !errors.Is(err, ErrExpired) {
		t.Errorf("u5 after its TTL: %v, want ErrExpired", err)
	}
	if n, b := s.Len(); n != 0 || b != 0 {
		t.Errorf("after expiry: %d files, %d bytes", n, b)
	}
	if n := filesIn(t, dir); n != 0 {
		t.Errorf("after expiry: %d files left in the store's folder", n)
	}
}

func TestTokensDiffer(t *testing.T) {
	if a, b := Token(), Token(); a == b || len(a) != 32 {
		t.Errorf("tokens %q %q", a, b)
	}
}

// A file read while the store drops it is read whole: the reader's file
// stays open.
func TestStoreReadWhileDropped(t *testing.T) {
	s := New(Config{TTL: time.Minute, MaxBytes: 8, MaxFiles: 1, Dir: t.TempDir()})
	s.Put("a", "u1", "", data("12345678"))
	_, f, _, err := s.Get("a", "u1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.Put("a", "u2", "", data("x"))
	if b, err := io.ReadAll(f); err != nil || string(b) != "12345678" {
		t.Errorf("read of a file dropped while open: %q %v", b, err)
	}
}

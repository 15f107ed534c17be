package outputs

import (
	"errors"
	"testing"
	"time"
)

func TestStoreBounds(t *testing.T) {
	s := New(Config{TTL: time.Minute, MaxBytes: 10, MaxFiles: 3})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	s.Put("a", "u1", "text/plain", []byte("1234"))
	s.Put("a", "u2", "text/plain", []byte("5678"))
	if _, data, err := s.Get("a", "u1"); err != nil || string(data) != "1234" {
		t.Fatalf("get u1: %q %v", data, err)
	}
	// 4+4+4 > 10: the oldest goes.
	s.Put("a", "u3", "text/plain", []byte("9abc"))
	if _, _, err := s.Get("a", "u1"); !errors.Is(err, ErrDropped) {
		t.Errorf("u1 after a put over the byte bound: %v, want ErrDropped", err)
	}
	// The file bound: three files of one byte each, then a fourth.
	s.Put("a", "u4", "", []byte("x"))
	s.Put("a", "u5", "", []byte("y"))
	if n, b := s.Len(); n != 3 || b != 6 {
		t.Errorf("held %d files, %d bytes; want 3, 6", n, b)
	}
	if _, _, err := s.Get("a", "u2"); !errors.Is(err, ErrDropped) {
		t.Errorf("u2 after a put over the file bound: %v", err)
	}
	// Another owner's read is a read of an unknown URI.
	if _, _, err := s.Get("b", "u5"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's read: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get("a", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	// Larger than the whole store: not kept.
	if s.Put("a", "big", "", make([]byte, 11)) {
		t.Error("a file larger than the store was kept")
	}
	// Expiry.
	now = now.Add(time.Minute)
	if _, _, err := s.Get("a", "u5"); !errors.Is(err, ErrExpired) {
		t.Errorf("u5 after its TTL: %v, want ErrExpired", err)
	}
	if n, b := s.Len(); n != 0 || b != 0 {
		t.Errorf("after expiry: %d files, %d bytes", n, b)
	}
}

func TestTokensDiffer(t *testing.T) {
	if a, b := Token(), Token(); a == b || len(a) != 32 {
		t.Errorf("tokens %q %q", a, b)
	}
}

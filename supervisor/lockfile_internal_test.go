package supervisor

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// The runtime lock is exclusive: a second taker waits, as long as its
// context allows, and gets the lock once the first lets go.
func TestLockFileIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := lockFile(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lock while the first is held: %v, want the wait to end with its context", err)
	}
	unlock()
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	again, err := lockFile(ctx, path)
	if err != nil {
		t.Fatalf("the lock after it was let go: %v", err)
	}
	again()
}

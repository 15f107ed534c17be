package logwatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWatcherWakesWaiterOnObservedLine(t *testing.T) {
	var ready int // guarded by w's lock
	w := New(2, func(line string) bool {
		if strings.Contains(line, "ready") {
			ready++
			return true
		}
		return false
	})
	done := make(chan error, 1)
	go func() {
		done <- w.Wait(t.Context(), func() bool { return ready >= 2 })
	}()
	for _, chunk := range []string{"start\nwor", "ker ready\n", "noise\n", "worker re", "ady\ntrailing"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the second ready line")
	}
	w.Locked(func() {
		if ready != 2 {
			t.Errorf("observed %d ready lines, want 2 (a line counts once its newline arrives)", ready)
		}
	})
	if got := w.Tail(0); got != "noise\nworker ready" {
		t.Errorf("Tail(0) = %q, want the last two whole lines", got)
	}
	if got := w.Tail(1); got != "worker ready" {
		t.Errorf("Tail(1) = %q", got)
	}
}

func TestWatcherWaitEndsWithContext(t *testing.T) {
	w := New(0, func(string) bool { return true })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := w.Wait(ctx, func() bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want the context's deadline", err)
	}
}

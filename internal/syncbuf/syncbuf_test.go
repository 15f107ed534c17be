package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestBufferKeepsAll(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 800) {
		t.Errorf("kept %d bytes, want 1600 of ab", len(got))
	}
}

func TestBufferMaxKeepsTheEnd(t *testing.T) {
	b := Buffer{Max: 5}
	for _, s := range []string{"abc", "defg", "hi"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "efghi" {
		t.Errorf("kept %q, want the last 5 bytes %q", got, "efghi")
	}
}

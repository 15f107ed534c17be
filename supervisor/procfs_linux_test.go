package supervisor

import (
	"errors"
	"os"
	"testing"
)

func TestParseStatm(t *testing.T) {
	page := int64(os.Getpagesize())
	for in, want := range map[string]int64{
		"123 45 6 7 0 8 0\n": 45 * page,
		"1 2\n":              2 * page,
		"1 2":                2 * page,
		"":                   -1,
		"1":                  -1,
		"1 x 3":              -1,
		"1  3":               -1,
		"1 2x 3":             -1,
	} {
		got, err := parseStatm(1, []byte(in))
		if want < 0 {
			if err == nil {
				t.Errorf("%q: %d, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestStatmFileReadsTheProcessUntilClosed(t *testing.T) {
	var s statmFile
	for range 3 { // the descriptor is read again, at offset 0
		rss, err := s.resident(os.Getpid())
		if err != nil || rss <= 0 {
			t.Fatalf("resident: %d, %v", rss, err)
		}
	}
	s.close()
	if _, err := s.resident(os.Getpid()); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("after close: %v, want os.ErrClosed", err)
	}
}

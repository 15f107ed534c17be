// Package logwatch lets a test or a benchmark wait for what a child process
// logs (pyrun's --log-format json lines) instead of sleeping: a Watcher is
// the child's stderr; it hands each line to the caller's observer and wakes
// whoever waits when the observer records something.
package logwatch

import (
	"bytes"
	"context"
	"strings"
	"sync"
)

// Watcher splits what is written to it into lines, keeps the last of them
// for error messages and gives each to its observer; safe for concurrent
// use. The observer, Wait's conditions and Locked's functions all run under
// one lock, so what the observer records needs no lock of its own.
type Watcher struct {
	keep    int
	observe func(line string) bool

	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced when observe reports a change
}

// New returns a Watcher that keeps the last keep lines (all of them if keep
// is 0) and calls observe with each line, without its newline; observe says
// whether it recorded something a waiter may be waiting for.
func New(keep int, observe func(line string) bool) *Watcher {
	return &Watcher{keep: keep, observe: observe, changed: make(chan struct{})}
}

// Write takes the child's output; a line counts once its newline arrives.
func (w *Watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		w.lines = append(w.lines, line)
		if w.keep > 0 && len(w.lines) > w.keep {
			w.lines = w.lines[len(w.lines)-w.keep:]
		}
		if w.observe(line) {
			close(w.changed)
			w.changed = make(chan struct{})
		}
	}
	return len(p), nil
}

// Tail is the last n of the lines kept (all of them if n is 0), joined by
// newlines.
func (w *Watcher) Tail(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	from := 0
	if n > 0 {
		from = max(0, len(w.lines)-n)
	}
	return strings.Join(w.lines[from:], "\n")
}

// Wait waits until cond holds, checking it again after each change the
// observer reports; it returns ctx's error if ctx ends first.
func (w *Watcher) Wait(ctx context.Context, cond func() bool) error {
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Locked runs f under the Watcher's lock, to read what the observer
// records.
func (w *Watcher) Locked(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
}

// Package syncbuf is a byte buffer that one goroutine may read while others
// write to it: a child process's output, which os/exec copies from a
// goroutine of its own, or a logger's. Tests and the scripts under scripts/
// collect output in it to show or search when something fails.
package syncbuf

import "sync"

// Buffer collects what is written to it; safe for concurrent use. The zero
// Buffer keeps everything; one with Max > 0 keeps only the last Max bytes,
// for output that may run long (a soak's pyrun log).
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

// Write keeps p (or, past Max, the end of what has been written); it never
// fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if b.Max > 0 && len(b.buf) > b.Max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.Max:]...)
	}
	return len(p), nil
}

// String is what has been kept so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// blob is the bytes of a checkpoint on the worker's stdout, after its line
// (docs/protocol.md, Checkpoints). readEvents hands it, with the event, to
// the call that asked for the checkpoint (Dedicated.Checkpoint), which
// reads the bytes straight from the pipe as the worker writes them: a
// checkpoint of any size costs pyrun the buffers of its reader, never a copy
// of the whole. readEvents reads nothing more of the pipe until that call
// is done with it, or the worker was killed, and then drains what is left.
// The reads wait for the worker checkpointTimeout in all; past that the
// worker is killed.
type blob struct {
	mu   sync.Mutex // held by a read, and by pass
	r    io.Reader  // the worker's stdout, buffered
	pipe deadliner  // the pipe under r, whose deadline bounds a read; nil: none
	left int64      // bytes not read yet
	wait time.Duration
	// err: why the bytes broke off (no more are read); stalled: because
	// the worker kept them waiting past checkpointTimeout.
	err     error
	stalled bool
	over    bool          // readEvents went on past the bytes
	taken   chan struct{} // closed by done: the call is done with the bytes
	passed  chan struct{} // closed by pass
	once    sync.Once
}

// deadliner is a pipe whose reads can time out (*os.File).
type deadliner interface{ SetReadDeadline(time.Time) error }

func newBlob(r io.Reader, pipe any, n int64) *blob {
	b := &blob{r: r, left: n, wait: checkpointTimeout, taken: make(chan struct{}), passed: make(chan struct{})}
	if d, ok := pipe.(deadliner); ok && d.SetReadDeadline(time.Time{}) == nil {
		b.pipe = d
	}
	return b
}

var errBlobOver = errors.New("the checkpoint's bytes are no longer to be read")

// Read reads the checkpoint's bytes; io.EOF after the last.
func (b *blob) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.err != nil:
		return 0, b.err
	case b.over:
		return 0, errBlobOver
	case b.left == 0:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	return b.readLocked(p)
}

func (b *blob) readLocked(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	began := time.Now()
	if b.pipe != nil {
		_ = b.pipe.SetReadDeadline(began.Add(max(b.wait, 0)))
	}
	n, err := b.r.Read(p)
	b.wait -= time.Since(began)
	b.left -= int64(n)
	switch {
	case err == nil || (errors.Is(err, io.EOF) && b.left == 0):
		return n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.stalled = true
		b.err = fmt.Errorf("its checkpoint's bytes did not come within %s", checkpointTimeout)
	case errors.Is(err, io.EOF):
		b.err = fmt.Errorf("its checkpoint ended %d bytes early", b.left)
	default:
		b.err = fmt.Errorf("read its checkpoint: %w", err)
	}
	return n, b.err
}

// done says that the call is done with the bytes, waits until readEvents
// is past them, and returns why they broke off, if they did. Safe on nil.
func (b *blob) done() error {
	if b == nil {
		return nil
	}
	b.once.Do(func() { close(b.taken) })
	<-b.passed
	return b.err
}

// pass drains what the call left of the bytes and ends their reads: once
// the call is done with them, or the worker was killed (its pipe then
// ends). Its error is why they broke off.
func (b *blob) pass() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(b.passed)
	var buf []byte
	for b.err == nil && b.left > 0 {
		if buf == nil {
			buf = make([]byte, 64<<10)
		}
		if _, err := b.readLocked(buf); err != nil {
			break
		}
	}
	b.over = true
	if b.pipe != nil {
		_ = b.pipe.SetReadDeadline(time.Time{})
	}
	return b.err
}

// passBlob queues ev, a checkpoint's line, for the call that asked for it,
// with the reader of its bytes, and waits until the call is done with them
// (blob). A checkpoint past max is drained here and refused. An error is
// the worker's stdout breaking off.
func (c *conn) passBlob(p *process, pipe io.Reader, er *eventReader, ev event) error {
	n := ev.Mem + ev.FS - ev.LeftOut // an increment's left out (Image.Kept)
	if ev.Error != "" || n == 0 {
		c.events <- ev
		return nil
	}
	if ev.Mem < 0 || ev.FS < 0 {
		return fmt.Errorf("%w: a checkpoint of %d + %d bytes", errGarbage, ev.Mem, ev.FS)
	}
	if ev.Mem+ev.FS > c.maxCheckpoint {
		if _, err := io.CopyN(io.Discard, er.r, n); err != nil {
			return fmt.Errorf("%w: checkpoint ended early: %v", errGarbage, err)
		}
		ev.Error = fmt.Sprintf("it has %d bytes, more than --max-checkpoint allows (%d)", ev.Mem+ev.FS, c.maxCheckpoint)
		ev.Mem, ev.FS, ev.LeftOut, ev.Kept = 0, 0, 0, nil
		c.events <- ev
		return nil
	}
	b := newBlob(er.r, pipe, n)
	ev.blob = b
	c.events <- ev
	select {
	case <-b.taken:
	case <-p.killed:
		// Nobody reads it, or the call's reads end with the pipe.
	}
	if err := b.pass(); err != nil {
		if b.stalled {
			p.kill(retirement{RestartProtocol, "it took no checkpoint in time"})
		}
		return fmt.Errorf("%w: %v", errGarbage, err)
	}
	return nil
}

package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Checkpoints of a session's worker (docs/sessions.md, Durable sessions):
// the worker side is pyodide-host/checkpoint.ts; storing them is package
// supervisor/checkpoint's. Here: the request, reading the bytes, and the
// start of a worker from a checkpoint.

// DefaultMaxCheckpoint bounds a checkpoint's raw bytes (Config.MaxCheckpoint).
const DefaultMaxCheckpoint = 256 << 20

// ErrNotDurable wraps the error of a checkpoint the worker would not take:
// its state cannot be restored right (native code), or it is too large.
var ErrNotDurable = errors.New("the session cannot be checkpointed")

// Image is a checkpoint as the worker made it: Pyodide's memory snapshot,
// the blob of its files, and its clock (performance.now, ms) then.
type Image struct {
	// Mem and FS are its sizes: R gives Mem bytes of memory snapshot,
	// then FS bytes of files.
	Mem, FS int64
	// R reads its bytes. Of an Image Checkpoint gives, it reads them from
	// the worker's stdout as they come, and only until the function given
	// the Image returns.
	R     io.Reader
	Clock float64
	// Namespace, for a checkpoint of a shared session worker taken for one
	// of its sessions, is that session's namespace: a worker started from
	// it keeps that namespace only (docs/sessions.md, Durable sessions).
	// "": the worker's whole state, as it is.
	Namespace string

	// Token, when not "", is the worker's name for this checkpoint: a
	// later one asked with since = Token (CheckpointSince) may leave out
	// the heap's chunks unchanged since (docs/protocol.md, Checkpoints).
	Token string
	// Since, when not "", says that this checkpoint is an increment to the
	// one the worker named so: the heap's chunks Kept lists (ranges of
	// chunk indices, first and count; chunk i is the CheckpointChunk bytes
	// from the heap's offset plus i*CheckpointChunk) are that one's, and
	// R leaves their LeftOut bytes out. Mem and FS are the whole state's.
	Since   string
	Kept    [][2]int64
	LeftOut int64
}

// CheckpointChunk is how much of a worker's heap one chunk of an increment
// holds (Image.Kept).
const CheckpointChunk = 256 << 10

// restoreSpec is where a worker finds the checkpoint it starts from: a file
// of mem bytes of memory snapshot, then fs bytes of files.
type restoreSpec struct {
	Path  string  `json:"path"`
	Mem   int64   `json:"mem"`
	FS    int64   `json:"fs"`
	Clock float64 `json:"clock"`
	// Keep, when set, is the one namespace the restored worker keeps; the
	// others the checkpoint holds are dropped before it is ready.
	Keep string `json:"keep,omitempty"`
	// Sums, when set, are the sums of the checkpoint's heap chunks, which
	// the worker takes as those of its last checkpoint (chunksums.go).
	Sums *restoredSums `json:"sums,omitempty"`
}

// token is the worker's name for the state restored from s: "" without
// sums.
func (s *restoreSpec) token() string {
	if s == nil || s.Sums == nil {
		return ""
	}
	return s.Sums.Token
}

// checkpointTimeout bounds how long the worker takes to make a checkpoint
// and, in all, how long the reads of its bytes wait for it: the time the
// one who reads them (the encoding, the store) takes is not the worker's.
var checkpointTimeout = 60 * time.Second

// Checkpoint asks the worker, between calls, for a checkpoint of its state
// and calls take with it, while the worker is held: take reads the bytes
// from the worker's stdout as the worker writes them, so that neither
// holds a copy of the whole state (a checkpoint of a session near its
// memory limit used to double the worker's memory, and pyrun's several
// times over: issue 36). What take leaves unread is drained. It waits for a
// running call. An error wrapping ErrNotDurable means the worker's state
// cannot be checkpointed as it is; one wrapping ErrWorkerLost, that the
// worker is gone; else take's error, and the worker goes on.
func (d *Dedicated) Checkpoint(ctx context.Context, take func(*Image) error) error {
	return d.checkpoint(ctx, request{Type: "checkpoint"}, take)
}

// CheckpointSince is Checkpoint, for a checkpoint the caller keeps and may
// take an increment to later: the Image has a Token; and with since, the
// Token of an earlier checkpoint of this worker the caller holds, it may
// be an increment to that one (Image.Since). A since the worker does not
// know (another worker's, an older one) gives the whole state.
func (d *Dedicated) CheckpointSince(ctx context.Context, since string, take func(*Image) error) error {
	return d.checkpoint(ctx, request{Type: "checkpoint", Chunks: true, Since: since}, take)
}

func (d *Dedicated) checkpoint(ctx context.Context, req request, take func(*Image) error) error {
	// A pool whose sessions take checkpoints may restore them: from now on
	// it keeps a restore parked (parked.go).
	d.pool.mu.Lock()
	if !d.pool.parking {
		d.pool.parkLocked()
	}
	d.pool.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost != "" {
		return fmt.Errorf("%w: %s", ErrWorkerLost, d.lost)
	}
	if d.w.unsettled != "" {
		if err := d.w.settle(d.pool.Config().Timeout); err != nil {
			d.loseLocked(err.Error())
			return fmt.Errorf("%w: %v", ErrWorkerLost, err)
		}
	}
	if why := d.w.stale(); why.given() {
		d.loseLocked(why.why)
		return fmt.Errorf("%w: %s", ErrWorkerLost, why.why)
	}
	// The CPU a checkpoint takes is not the idle code's (--idle-cpu).
	d.pool.setDedicatedIdle(d.w, time.Time{})
	defer func() { d.pool.setDedicatedIdle(d.w, time.Now()) }()
	d.seq++
	id := fmt.Sprintf("checkpoint-%d", d.seq)
	req.ID = id
	if err := d.w.send(req, answerWriteLimit); err != nil {
		d.w.kill(retirement{RestartProtocol, "it did not accept a request"})
		d.loseLocked("it did not accept a checkpoint request")
		return fmt.Errorf("%w: %v", ErrWorkerLost, err)
	}
	timer := time.NewTimer(checkpointTimeout)
	defer timer.Stop()
	select {
	case ev, ok := <-d.w.events:
		switch {
		case !ok:
			d.loseLocked("it exited while it took a checkpoint")
			return fmt.Errorf("%w: it exited while it took a checkpoint", ErrWorkerLost)
		case ev.Type != "checkpoint" || ev.ID != id:
			d.w.kill(retireProtocol)
			_ = ev.blob.done() // another checkpoint's bytes: they end with the worker
			d.loseLocked("it broke the protocol")
			return fmt.Errorf("%w: %q while it took a checkpoint", ErrWorkerLost, ev.Type)
		case ev.Error != "":
			return fmt.Errorf("%w: %s", ErrNotDurable, ev.Error)
		case ev.Since != "" && ev.Since != req.Since:
			d.w.kill(retireProtocol)
			_ = ev.blob.done()
			d.loseLocked("it broke the protocol")
			return fmt.Errorf("%w: an increment to checkpoint %q, not the %q asked for", ErrWorkerLost, ev.Since, req.Since)
		}
		return d.takeLocked(ctx, ev, take)
	case <-timer.C:
		d.w.kill(retirement{RestartProtocol, "it took no checkpoint in time"})
		d.loseLocked("it took no checkpoint in time")
		return fmt.Errorf("%w: no checkpoint within %s", ErrWorkerLost, checkpointTimeout)
	case <-ctx.Done():
		// Its answer would come when no one reads it: the worker is of no
		// more use (stale would find the event).
		d.w.kill(retirement{restartStopped, "its checkpoint was called off"})
		d.loseLocked("its checkpoint was called off")
		return fmt.Errorf("take a checkpoint: %w", ctx.Err())
	}
}

// takeLocked gives the checkpoint ev announced to take, and waits until
// readEvents is past its bytes. d.mu is held.
func (d *Dedicated) takeLocked(ctx context.Context, ev event, take func(*Image) error) error {
	img := &Image{Mem: ev.Mem, FS: ev.FS, Clock: ev.Clock, R: &ctxReader{ctx: ctx, r: ev.blob},
		Token: ev.Token, Since: ev.Since, Kept: ev.Kept, LeftOut: ev.LeftOut}
	if ev.blob == nil {
		img.R = bytes.NewReader(nil)
	}
	err := take(img)
	if broken := ev.blob.done(); broken != nil {
		d.loseLocked("it broke off its checkpoint: " + broken.Error())
		return fmt.Errorf("%w: it broke off its checkpoint: %v", ErrWorkerLost, broken)
	}
	return err
}

// ctxReader is r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, fmt.Errorf("take a checkpoint: %w", err)
	}
	return c.r.Read(p)
}

// BaseSnapshot is the memory snapshot the pool's workers start from now, or
// nil: checkpoints are kept as a difference from it (supervisor/checkpoint).
func (p *Pool) BaseSnapshot(ctx context.Context) *Snapshot {
	if p.snaps == nil {
		return nil
	}
	snap, _ := p.snaps.get(ctx, p.Config())
	return snap
}

// StartRestored starts a session's worker from a checkpoint instead of the
// snapshot: img's state, with its files. It is written to a private file
// in dir for the worker to read, and removed once the worker is ready.
// It sets img.Token to the worker's name for the state restored, when the
// worker has one: the worker's next checkpoint asked with since = Token
// (CheckpointSince) may then leave out the heap's chunks still as img
// has them.
func (p *Pool) StartRestored(ctx context.Context, img *Image, dir string, exited func()) (*Dedicated, error) {
	if d, ok, err := p.startRestoredParked(ctx, img, exited); ok {
		return d, err
	}
	f, err := os.CreateTemp(dir, "restore-*.bin")
	if err != nil {
		return nil, fmt.Errorf("restore a session: %w", err)
	}
	defer os.Remove(f.Name())
	sums, err := fillImage(f, img)
	if err != nil {
		return nil, err
	}
	spec := &restoreSpec{Path: f.Name(), Mem: img.Mem, FS: img.FS, Clock: img.Clock, Keep: img.Namespace, Sums: sums}
	d, err := p.startDedicated(ctx, exited, spec)
	if err == nil {
		p.countRestore("started")
		img.Token = spec.token()
	}
	return d, err
}

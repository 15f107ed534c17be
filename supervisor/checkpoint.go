package supervisor

import (
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
	Mem, Files []byte
	Clock      float64
	// Namespace, for a checkpoint of a shared session worker taken for one
	// of its sessions, is that session's namespace: a worker started from
	// it keeps that namespace only (docs/sessions.md, Durable sessions).
	// "": the worker's whole state, as it is.
	Namespace string
}

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
}

// readBlob reads the bytes that follow a checkpoint line into ev.Blob, or
// drains them and sets ev.Error when they pass max. An error is the
// worker's stdout ending or breaking.
func (er *eventReader) readBlob(ev *event, max int64) error {
	n := ev.Mem + ev.FS
	if ev.Error != "" || n == 0 {
		return nil
	}
	if n > max {
		if _, err := io.CopyN(io.Discard, er.r, n); err != nil {
			return fmt.Errorf("%w: checkpoint ended early: %v", errGarbage, err)
		}
		ev.Mem, ev.FS = 0, 0
		ev.Error = fmt.Sprintf("%v: it has %d bytes, more than --max-checkpoint allows (%d)", ErrNotDurable, n, max)
		return nil
	}
	ev.Blob = make([]byte, n)
	if _, err := io.ReadFull(er.r, ev.Blob); err != nil {
		return fmt.Errorf("%w: checkpoint ended early: %v", errGarbage, err)
	}
	return nil
}

// checkpointTimeout bounds the taking of a checkpoint by the worker.
const checkpointTimeout = 60 * time.Second

// Checkpoint asks the worker, between calls, for a checkpoint of its state.
// It waits for a running call. An error wrapping ErrNotDurable means the
// worker's state cannot be checkpointed as it is; one wrapping
// ErrWorkerLost, that the worker is gone.
func (d *Dedicated) Checkpoint(ctx context.Context) (*Image, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost != "" {
		return nil, fmt.Errorf("%w: %s", ErrWorkerLost, d.lost)
	}
	if d.w.unsettled != "" {
		if err := d.w.settle(d.pool.Config().Timeout); err != nil {
			d.loseLocked(err.Error())
			return nil, fmt.Errorf("%w: %v", ErrWorkerLost, err)
		}
	}
	if why := d.w.stale(); why.given() {
		d.loseLocked(why.why)
		return nil, fmt.Errorf("%w: %s", ErrWorkerLost, why.why)
	}
	// The CPU a checkpoint takes is not the idle code's (--idle-cpu).
	d.pool.setDedicatedIdle(d.w, time.Time{})
	defer func() { d.pool.setDedicatedIdle(d.w, time.Now()) }()
	d.seq++
	id := fmt.Sprintf("checkpoint-%d", d.seq)
	if err := d.w.send(request{Type: "checkpoint", ID: id}, answerWriteLimit); err != nil {
		d.w.kill(retirement{RestartProtocol, "it did not accept a request"})
		d.loseLocked("it did not accept a checkpoint request")
		return nil, fmt.Errorf("%w: %v", ErrWorkerLost, err)
	}
	timer := time.NewTimer(checkpointTimeout)
	defer timer.Stop()
	select {
	case ev, ok := <-d.w.events:
		switch {
		case !ok:
			d.loseLocked("it exited while it took a checkpoint")
			return nil, fmt.Errorf("%w: it exited while it took a checkpoint", ErrWorkerLost)
		case ev.Type != "checkpoint" || ev.ID != id:
			d.w.kill(retireProtocol)
			d.loseLocked("it broke the protocol")
			return nil, fmt.Errorf("%w: %q while it took a checkpoint", ErrWorkerLost, ev.Type)
		case ev.Error != "":
			return nil, fmt.Errorf("%w: %s", ErrNotDurable, ev.Error)
		}
		return &Image{Mem: ev.Blob[:ev.Mem], Files: ev.Blob[ev.Mem:], Clock: ev.Clock}, nil
	case <-timer.C:
		d.w.kill(retirement{RestartProtocol, "it took no checkpoint in time"})
		d.loseLocked("it took no checkpoint in time")
		return nil, fmt.Errorf("%w: no checkpoint within %s", ErrWorkerLost, checkpointTimeout)
	case <-ctx.Done():
		// Its answer would come when no one reads it: the worker is of no
		// more use (stale would find the event).
		d.w.kill(retirement{restartStopped, "its checkpoint was called off"})
		d.loseLocked("its checkpoint was called off")
		return nil, fmt.Errorf("take a checkpoint: %w", ctx.Err())
	}
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
func (p *Pool) StartRestored(ctx context.Context, img *Image, dir string, exited func()) (*Dedicated, error) {
	f, err := os.CreateTemp(dir, "restore-*.bin")
	if err != nil {
		return nil, fmt.Errorf("restore a session: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(img.Mem)
	if err == nil {
		_, err = f.Write(img.Files)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("restore a session: %w", err)
	}
	spec := &restoreSpec{Path: f.Name(), Mem: int64(len(img.Mem)), FS: int64(len(img.Files)), Clock: img.Clock,
		Keep: img.Namespace}
	return p.startDedicated(ctx, exited, spec)
}

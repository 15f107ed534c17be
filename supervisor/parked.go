package supervisor

// Parked restores. A session restored from a checkpoint (its worker lost,
// pyrun restarted, the session moved here or forked) used to wait for a
// worker process started for it: Deno's start, its Worker thread, Pyodide's
// modules, then the restore proper. A parked worker is a session worker's
// process started ahead as far as a restore goes without its checkpoint,
// waiting on stdin for the line that names it (docs/protocol.md, Parked
// restores); StartRestored hands the next restore to one, and the pool
// parks another. It holds no state, runs no code of a call before its
// restore, and may read only its own folder, where its checkpoint is put,
// and the base snapshot, which it warms its compiled code with.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// DefaultRestoreSpares is how many parked workers a pool whose sessions take
// checkpoints keeps, once it has taken or restored one.
const DefaultRestoreSpares = 1

// parkedWorker is a parked restore's process and what the pool keeps of it.
type parkedWorker struct {
	w    *worker
	dir  string             // its own folder: its checkpoint goes there
	gen  int                // the configuration generation it was started with
	pkgs *packages.Resolver // that generation's packages
	// owner is the exited of the session's worker it became, once restored:
	// the process's end is told to it from then on.
	owner atomic.Pointer[func()]
}

// restoreRequest hands a parked worker its checkpoint.
type restoreRequest struct {
	Type string `json:"type"` // "restore"
	*restoreSpec
}

// parksWanted is how many parked workers the pool keeps now.
func (p *Pool) parksWantedLocked() int {
	if p.closed || !p.parking || !p.cfg.Checkpoints || !p.engine.Features().Snapshots || p.snaps == nil {
		return 0
	}
	return max(p.cfg.RestoreSpares, 0)
}

// parkLocked starts parked workers up to the number wanted, each in the
// background (owned by p.wg; Close kills them). Called once a checkpoint
// was taken or restored: a pool whose sessions never took one has none.
func (p *Pool) parkLocked() {
	p.parking = true
	for len(p.parked)+p.parksStarting < p.parksWantedLocked() {
		p.parksStarting++
		p.wg.Go(func() {
			pw, err := p.startParked()
			if err == nil {
				// Only a worker that has parked is one: until then its start
				// would still take the CPU from the restore.
				if err = pw.w.awaitParked(p.ctx, p.Config().StartTimeout); err != nil {
					pw.w.kill(retirement{RestartCrash, "it did not park"})
					p.wg.Go(func() {
						<-pw.w.exited
						os.RemoveAll(pw.dir)
					})
				}
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			p.parksStarting--
			if err != nil {
				if p.ctx.Err() == nil {
					p.log.Warn("a parked restore did not start; restores start their own worker", "error", err)
				}
				return
			}
			if pw.gen != p.gen || len(p.parked) >= p.parksWantedLocked() {
				p.dropParked(pw, "not needed")
				return
			}
			p.parked = append(p.parked, pw)
		})
	}
}

// startParked starts a parked worker under the configuration in force. It
// returns once the process has started; it says "parked" once it has.
func (p *Pool) startParked() (*parkedWorker, error) {
	p.mu.Lock()
	p.seq++
	name := fmt.Sprintf("session-worker-%d", p.seq)
	cfg, gen, pkgs := p.cfg, p.gen, p.pkgs
	p.mu.Unlock()
	dir, err := os.MkdirTemp("", "pyrun-park-")
	if err != nil {
		return nil, fmt.Errorf("park a restore: %w", err)
	}
	// The base snapshot, which it warms its compiled code with while it
	// waits (pyodide-host/worker.ts, warmElsewhere): a restore onto it then
	// spends less on compiling. One that fails its check is not given.
	var snap *Snapshot
	if p.snaps != nil {
		var verify func() error
		if snap, verify = p.snaps.get(p.ctx, cfg); snap != nil && verify != nil && verify() != nil {
			snap = nil
		}
	}
	cmd, err := p.newCmd(cfg, launch{session: true, park: dir, snapshot: snap})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("park a restore: %w", err)
	}
	pw := &parkedWorker{dir: dir, gen: gen, pkgs: pkgs}
	exited := func() {
		if f := pw.owner.Load(); f != nil {
			(*f)()
		}
	}
	c := newConn(cfg)
	proc, err := startProcess(name, cmd, p.log.Named(name), p.logs, c.readEvents, exited)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("park a restore: %w", err)
	}
	c.proc = proc
	pw.w = &worker{process: proc, conn: c}
	return pw, nil
}

// dropParked ends pw, a parked worker no one has, and removes its folder
// once it has exited.
func (p *Pool) dropParked(pw *parkedWorker, why string) {
	pw.w.kill(retirement{restartStopped, why})
	p.wg.Go(func() {
		<-pw.w.exited
		os.RemoveAll(pw.dir)
	})
}

// takeParkedLocked is a parked worker of the configuration in force, or
// nil; one of another is ended. The caller parks the next once its
// restore is done (parkLocked): started now, the next one's start would
// take the CPU from the restore.
func (p *Pool) takeParkedLocked() *parkedWorker {
	for len(p.parked) > 0 {
		pw := p.parked[0]
		p.parked = p.parked[1:]
		if pw.gen == p.gen && !pw.w.gone() {
			return pw
		}
		p.dropParked(pw, "its configuration changed")
	}
	return nil
}

// restoreParked restores img onto pw, which is then the session's; its
// folder goes with its process. spec, when set, is the checkpoint's file,
// written into pw's folder (removed once read, after a restore that went
// well): after a failure the restore can still start a worker of its own
// from it. After any failure pw is the caller's to drop.
func (p *Pool) restoreParked(ctx context.Context, pw *parkedWorker, img *Image, exited func()) (*Dedicated, *restoreSpec, error) {
	path := filepath.Join(pw.dir, "restore.bin")
	sums, err := writeImage(path, img)
	if err != nil {
		return nil, nil, err
	}
	spec := &restoreSpec{Path: path, Mem: img.Mem, FS: img.FS, Clock: img.Clock, Keep: img.Namespace, Sums: sums}
	if pw.w.gone() {
		return nil, spec, errParkedLost
	}
	began := time.Now()
	cfg := p.Config()
	if err := pw.w.send(restoreRequest{Type: "restore", restoreSpec: spec}, answerWriteLimit); err != nil {
		return nil, spec, fmt.Errorf("%w: %v", errParkedLost, err)
	}
	if err := pw.w.awaitReady(ctx, cfg.StartTimeout); err != nil {
		return nil, spec, fmt.Errorf("restore a session onto a parked worker: %w", err)
	}
	if err := checkEngine(pw.w, p.engine); err != nil {
		return nil, spec, fmt.Errorf("restore a session onto a parked worker: %w", err)
	}
	os.Remove(path) // read: the worker holds the state now
	pw.w.readyAt = time.Now()
	// The owner learns of the process's end from here on, once, however
	// soon that is.
	if exited != nil {
		tell := sync.OnceFunc(exited)
		pw.owner.Store(&tell)
		if pw.w.gone() {
			tell()
		}
	}
	p.wg.Go(func() {
		<-pw.w.exited
		os.RemoveAll(pw.dir)
	})
	d := p.adoptDedicated(pw.w, cfg, pw.gen, pw.pkgs)
	p.countRestore("parked")
	d.w.log.Debug("dedicated worker ready", "startup", time.Since(began).Round(time.Millisecond),
		"in_worker_ms", d.w.ready.StartupMS, "from", "parked")
	return d, spec, nil
}

// errParkedLost: a parked worker was gone before it took its checkpoint.
var errParkedLost = errors.New("the parked worker was gone")

// writeImage writes img's bytes to a new private file at path (fillImage).
func writeImage(path string, img *Image) (*restoredSums, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("restore a session: %w", err)
	}
	sums, err := fillImage(f, img)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return sums, nil
}

// fillImage copies img's bytes into f, checks their count, and closes f.
// It sums the heap's chunks as they go by, for the restored worker
// (chunksums.go); nil sums: the heap is not one a worker sums.
func fillImage(f *os.File, img *Image) (*restoredSums, error) {
	sum := newChunkSummer(img.Mem)
	n, err := copySparse(f, io.TeeReader(img.R, sum))
	if err == nil && n != img.Mem+img.FS {
		err = fmt.Errorf("the checkpoint has %d bytes, not %d", n, img.Mem+img.FS)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("restore a session: %w", err)
	}
	return sum.result(), nil
}

// startRestoredParked is StartRestored onto a parked worker, when there is
// one: ok false when there is none.
func (p *Pool) startRestoredParked(ctx context.Context, img *Image, exited func()) (d *Dedicated, ok bool, err error) {
	p.mu.Lock()
	pw := p.takeParkedLocked()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.parkLocked()
		p.mu.Unlock()
	}()
	if pw == nil {
		return nil, false, nil
	}
	d, spec, err := p.restoreParked(ctx, pw, img, exited)
	if err == nil {
		img.Token = spec.token()
		return d, true, nil
	}
	defer p.dropParked(pw, "its restore failed")
	if spec == nil || ctx.Err() != nil {
		return nil, true, err
	}
	// Its checkpoint's file is there: a worker of its own reads it (a
	// parked worker that died parked, killed from outside, is no reason
	// to lose the session).
	if !errors.Is(err, errParkedLost) {
		p.log.Warn("a restore onto a parked worker failed; the restore starts its own", "error", err)
	}
	d, err = p.startDedicated(ctx, exited, spec)
	if err == nil {
		p.countRestore("started")
		img.Token = spec.token()
	}
	return d, true, err
}

// reparkLocked ends the parked workers of an older configuration (or all
// of them, once the pool is closed) and parks new ones as needed.
func (p *Pool) reparkLocked() {
	kept := p.parked[:0]
	for _, pw := range p.parked {
		if pw.gen == p.gen && !p.closed {
			kept = append(kept, pw)
		} else {
			p.dropParked(pw, "its configuration changed")
		}
	}
	clear(p.parked[len(kept):])
	p.parked = kept
	if p.parking {
		p.parkLocked()
	}
}

// countRestore counts a session's worker restored onto what.
func (p *Pool) countRestore(onto string) {
	p.mu.Lock()
	p.counts.Restores[onto]++
	p.mu.Unlock()
}

// awaitParked waits for a parked restore's announcement that it is parked.
func (c *conn) awaitParked(ctx context.Context, limit time.Duration) error {
	_, err := c.awaitStart(ctx, limit, "parked")
	return err
}

// copySparse copies r into f, new and empty, and returns the count. Pages
// of zeros are left as holes, which read as zeros: half of a small
// session's heap is zeros, and the page cache's pages the write would
// take for them cost the restore 10-12 ms of its 25 (31 MB).
func copySparse(f *os.File, r io.Reader) (int64, error) {
	const page = 4 << 10
	var zero [page]byte
	isZero := func(b []byte) bool { return bytes.Equal(b, zero[:len(b)]) }
	buf := make([]byte, 1<<20) // a multiple of page: pages stay aligned to the file's
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		for b := buf[:n]; len(b) > 0; {
			data := 0 // a run of pages with data, then one of zeros
			for data < len(b) && !isZero(b[data:min(data+page, len(b))]) {
				data = min(data+page, len(b))
			}
			if data > 0 {
				if _, err := f.WriteAt(b[:data], off); err != nil {
					return off, err
				}
			}
			zeros := data
			for zeros < len(b) && isZero(b[zeros:min(zeros+page, len(b))]) {
				zeros = min(zeros+page, len(b))
			}
			off += int64(zeros)
			b = b[zeros:]
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return off, f.Truncate(off) // the holes at its end count in its size
		case rerr != nil:
			return off, rerr
		}
	}
}

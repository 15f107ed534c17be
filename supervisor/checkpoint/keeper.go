package checkpoint

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Keeper takes sessions' checkpoints from their workers, keeps them in a
// Store, and starts workers from them: the sessions.Checkpointer of a
// pool's sessions.
type Keeper struct {
	store Store
	key   []byte // authenticates the records (auth.go)
	pool  *supervisor.Pool
	tmp   string // where a restore's file is written for its worker
	max   int64
	log   hclog.Logger

	holder string        // this process's name in leases
	ttl    time.Duration // how long a lease lasts unless renewed

	mu      sync.Mutex
	base    []byte // the base snapshot's bytes, for baseSHA
	baseSHA string
	last    Sizes
	leases  map[string]Lease // the sessions' leases this Keeper holds
	// lasts are the records the sessions' next checkpoints may be
	// increments to, by session id (lastRecord).
	lasts map[string]*lastRecord
}

// lastRecord is the record the Keeper wrote last of a worker's checkpoint,
// kept while a session's next checkpoint may be an increment to it: the
// worker's token for that checkpoint (supervisor.Image.Token), the base
// snapshot it is a difference from, where its heap's frames are, and its
// file from the Keeper's private folder, read with ReadAt rather than
// mapped, so that it costs pyrun the page cache's memory, not its own. The
// sessions a shared worker's checkpoint was kept for share it; refs counts
// them and the Takes reading it, under Keeper.mu.
type lastRecord struct {
	token, baseSHA string
	heap           []frame
	f              *os.File
	refs           int
}

// lastOf is the record session id's next checkpoint may be an increment
// to, held for the caller (unref), or nil: none, or of another base.
func (k *Keeper) lastOf(id, sha string) *lastRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lasts[id]
	if l == nil || l.baseSHA != sha {
		return nil
	}
	l.refs++
	return l
}

// unref lets go of l (nil: nothing); the last to removes its file.
func (k *Keeper) unref(l *lastRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unrefLocked(l)
}

func (k *Keeper) unrefLocked(l *lastRecord) {
	if l == nil {
		return
	}
	if l.refs--; l.refs == 0 {
		l.f.Close()
		_ = os.Remove(l.f.Name())
	}
}

// keepLast makes l the record the next checkpoints of the sessions ids
// may be increments to.
func (k *Keeper) keepLast(ids []string, l *lastRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		old := k.lasts[id]
		k.lasts[id] = l
		l.refs++
		k.unrefLocked(old)
	}
}

// forget drops the record session id's next checkpoint could have been an
// increment to: the session ended, moved, or is restored (its worker is
// another, which knows nothing of the record).
func (k *Keeper) forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unrefLocked(k.lasts[id])
	delete(k.lasts, id)
}

// Sizes are the figures of the last checkpoint kept.
type Sizes struct {
	Raw, Stored int64
	Took        time.Duration
	// Worker is the time until the worker's bytes began to come; Encode,
	// reading, XORing, compressing and writing them to the record file;
	// Store, the store's write.
	Worker, Encode, Store time.Duration
	// Frames are the heap's frames in the record; Reused, those copied
	// from the record before (the chunks the worker left out as unchanged:
	// an increment).
	Frames, Reused int
}

// NewKeeper keeps the checkpoints of pool's sessions in store, authenticated
// with key (at least MinKeyLen bytes: ReadKeyFile, DirKey). tmp is a
// private folder for restores' files; max bounds a checkpoint's raw bytes.
func NewKeeper(store Store, key []byte, pool *supervisor.Pool, tmp string, max int64, log hclog.Logger) (*Keeper, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("session store key: %d bytes, want at least %d", len(key), MinKeyLen)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if max <= 0 {
		max = supervisor.DefaultMaxCheckpoint
	}
	return &Keeper{store: store, key: key, pool: pool, tmp: tmp, max: max, log: log, holder: Holder("pyrun"),
		ttl: DefaultLeaseTTL, leases: map[string]Lease{}, lasts: map[string]*lastRecord{}}, nil
}

// Last says how large the last checkpoint kept was.
func (k *Keeper) Last() Sizes {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// baseNow is the base snapshot to take a difference from now, or nil.
func (k *Keeper) baseNow(ctx context.Context) ([]byte, string) {
	if k.pool == nil {
		return nil, ""
	}
	snap := k.pool.BaseSnapshot(ctx)
	if snap == nil {
		return nil, ""
	}
	return k.baseOf(snap.SHA256, snap.Path), snap.SHA256
}

// baseOf maps (once) the base snapshot of sha at path, read-only. Mapped,
// its 30 MiB are the page cache's rather than the Go heap's, which pyrun's
// collector lets grow to five times what it holds (cmd/pyrun/gc.go): read
// into the heap, it made pyrun itself hold some 350 MiB once sessions had
// checkpoints. A mapping of an older snapshot is never unmapped, as a
// checkpoint being encoded may still read it: one per snapshot pyrun
// makes, which it does once per runtime and package set.
func (k *Keeper) baseOf(sha, path string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.baseSHA == sha && k.base != nil {
		return k.base
	}
	if path == "" {
		return nil
	}
	b, err := mapFile(path)
	if err != nil {
		k.log.Warn("cannot read the base snapshot; checkpoints are kept whole", "error", err.Error())
		return nil
	}
	k.base, k.baseSHA = b, sha
	return b
}

// Take implements sessions.Checkpointer: one checkpoint of w, kept as the
// record of each session of saved (a shared session worker's sessions
// share it, each marked with its own namespace), compressed once. The
// state goes from the worker's pipe to a record file a chunk at a time
// (EncodeTo), and the store copies the file: pyrun holds no copy of it,
// however large (issues 36, 37).
func (k *Keeper) Take(ctx context.Context, w sessions.Worker, saved []sessions.Saved) error {
	if len(saved) == 0 {
		return nil
	}
	began := time.Now()
	base, sha := k.baseNow(ctx)
	seqs, err := k.nextSeqs(ctx, saved)
	if err != nil {
		return err
	}
	// The record this one may be an increment to: the worker then sends
	// only the heap's chunks that changed since, and the others' frames
	// are copied from it.
	last := k.lastOf(saved[0].ID, sha)
	defer k.unref(last)
	var since string
	if last != nil {
		since = last.token
	}
	var metaOf func(s sessions.Saved) Meta
	var raw, stored int64
	var took, encoded time.Duration
	var heap []frame
	var token string
	var reused int
	first, err := k.recordFile(func(f *os.File) error {
		return w.CheckpointSince(ctx, since, func(img *supervisor.Image) error {
			took = time.Since(began)
			taken := time.Now().UTC()
			metaOf = func(s sessions.Saved) Meta {
				return Meta{Session: s.ID, Owner: s.Owner, Seq: seqs[s.ID], AfterCall: s.AfterCall, Taken: taken,
					Started: s.Started, LastUsed: s.LastUsed, Clock: img.Clock, Namespace: cmp.Or(s.Namespace, img.Namespace)}
			}
			raw = img.Mem + img.FS
			var inc *increment
			if img.Since != "" {
				if last == nil || img.Since != last.token {
					return fmt.Errorf("encode checkpoint: the worker sent an increment to a checkpoint this pyrun does not hold")
				}
				inc = &increment{heap: last.heap, at: last.f, kept: img.Kept, leftOut: img.LeftOut}
			}
			// Buffered: a record is some thousand frames, many of them
			// a few bytes (a heap's zeros).
			bw := bufio.NewWriterSize(f, 1<<20)
			n, hp, err := encodeFrames(bw, metaOf(saved[0]), img.Mem, img.FS, img.R, base, sha, k.key, inc)
			if err == nil {
				err = bw.Flush()
			}
			if err != nil {
				return fmt.Errorf("encode checkpoint: %w", err)
			}
			stored, encoded, heap, token = n, time.Since(began), hp, img.Token
			for _, r := range img.Kept {
				reused += int(r[1])
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	var errs []error
	for i, s := range saved {
		rec := first
		if i > 0 {
			// The same state under this session's header, streamed from
			// the first record.
			if rec, err = k.recordFile(func(f *os.File) error { return ReheaderTo(f, first.record(), metaOf(s), k.key) }); err != nil {
				errs = append(errs, fmt.Errorf("encode checkpoint of %s: %w", s.ID, err))
				continue
			}
		}
		err := k.put(ctx, s.ID, rec.record(), seqs[s.ID])
		if i > 0 {
			rec.close()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The record's frames are the worker's checkpoint token whether or not
	// the store kept it: the next checkpoint of these sessions may be an
	// increment to it.
	k.keepOrClose(first, token, sha, heap, saved)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	k.log.Debug("checkpoint kept", "session_id", saved[0].ID, "sessions", len(saved), "raw", raw,
		"stored", stored, "frames", len(heap), "reused", reused, "worker", took.Round(time.Millisecond),
		"encode", (encoded - took).Round(time.Millisecond), "store", (time.Since(began) - encoded).Round(time.Millisecond))
	k.mu.Lock()
	k.last = Sizes{Raw: raw, Stored: stored, Took: time.Since(began), Worker: took, Encode: encoded - took,
		Store: time.Since(began) - encoded, Frames: len(heap), Reused: reused}
	k.mu.Unlock()
	return nil
}

// keepOrClose keeps rec, the record of the worker's checkpoint token, as
// the one the next checkpoints of saved may be increments to; without a
// token (a worker that takes none), or when it cannot be read again, it is
// removed, as are the records kept before.
func (k *Keeper) keepOrClose(rec *spooled, token, sha string, heap []frame, saved []sessions.Saved) {
	ids := make([]string, len(saved))
	for i, s := range saved {
		ids[i] = s.ID
	}
	if token == "" {
		rec.close()
		for _, id := range ids {
			k.forget(id)
		}
		return
	}
	// Unlinked while open, where the system allows it (unrefLocked
	// removes it else): a pyrun that dies leaves no such file behind.
	_ = os.Remove(rec.f.Name())
	k.keepLast(ids, &lastRecord{token: token, baseSHA: sha, heap: heap, f: rec.f})
}

// put keeps rec as session id's latest record, only with the session's
// lease in force (lease.go).
func (k *Keeper) put(ctx context.Context, id string, rec Record, seq uint64) error {
	l, ok := k.lease(id)
	if !ok {
		return fmt.Errorf("keep checkpoint of session %s: %w", id, ErrLeaseLost)
	}
	return k.store.Put(ctx, id, rec, seq, l)
}

// spooled is a record in a file of its own in the Keeper's private
// folder, open: a record is as large as the state at worst, and read from
// its file (ReadAt) it costs pyrun the page cache's memory, not its own,
// nor its heap's, whose collector lets it grow to five times what it holds
// (cmd/pyrun/gc.go).
type spooled struct {
	f    *os.File
	size int64
}

// record is s as a Record for the store (its Close is s.close's).
func (s *spooled) record() Record { return fileRecord{s.f, s.size} }

// close closes and removes s's file; nil: nothing.
func (s *spooled) close() {
	if s == nil {
		return
	}
	s.f.Close()
	_ = os.Remove(s.f.Name())
}

// recordFile is the record write writes to a new file in the Keeper's
// private folder.
func (k *Keeper) recordFile(write func(*os.File) error) (*spooled, error) {
	f, err := os.CreateTemp(k.tmp, "record-*")
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	s := &spooled{f: f}
	err = write(f)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			s.size = st.Size()
		}
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return s, nil
}

// mapFile maps the file at path read-only; nil for an empty file.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, nil
	}
	b, err := mapReadOnly(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return b, nil
}

// Restore implements sessions.Checkpointer: the latest record that passes
// its checks, else the one before it.
func (k *Keeper) Restore(ctx context.Context, id string, exited func()) (sessions.Worker, sessions.Saved, error) {
	k.forget(id) // the restored worker's checkpoints are not increments to its lost one's
	// The record is copied as it is read into a file of the Keeper's, for
	// the restored worker's next checkpoint to be an increment to it.
	spool, err := k.recordFile(func(*os.File) error { return nil })
	if err != nil {
		k.log.Debug("a restore without a copy of its record", "error", err.Error())
	}
	var to *os.File
	if spool != nil {
		to = spool.f
	}
	meta, img, err := k.load(ctx, id, to)
	if err != nil {
		spool.close()
		return nil, sessions.Saved{}, err
	}
	// The record, read to its end by a start that goes well, is released
	// by one that fails before.
	p := img.R.(*Payload)
	defer p.Close()
	d, err := k.pool.StartRestored(ctx, img, k.tmp, exited)
	if err != nil {
		spool.close()
		return nil, sessions.Saved{}, err
	}
	k.keepRestored(id, meta, img.Token, p, spool)
	return d, savedOf(meta), nil
}

// keepRestored keeps spool, the copy of session id's record restored from
// p, as the one its next checkpoint may be an increment to: the restored
// worker names the state token. Without a token, or a whole copy, it is
// removed.
func (k *Keeper) keepRestored(id string, meta Meta, token string, p *Payload, spool *spooled) {
	if spool == nil {
		return
	}
	err := p.Spooled()
	var frames []frame
	if err == nil && token != "" {
		spool.size = p.rec.Size()
		if err = spool.f.Truncate(spool.size); err == nil {
			frames, err = heapFrames(spool.f, spool.size, meta, p.start)
		}
	}
	if err != nil || token == "" {
		if err != nil {
			k.log.Debug("the restored session's next checkpoint is whole", "session_id", id, "error", err.Error())
		}
		spool.close()
		return
	}
	k.keepOrClose(spool, token, meta.Base, frames, []sessions.Saved{{ID: id}})
}

func savedOf(m Meta) sessions.Saved {
	return sessions.Saved{ID: m.Session, Owner: m.Owner, AfterCall: m.AfterCall, Started: m.Started,
		LastUsed: m.LastUsed, Taken: m.Taken, Namespace: m.Namespace}
}

// Load reads and checks session id's latest intact checkpoint.
func (k *Keeper) Load(ctx context.Context, id string) (Meta, *supervisor.Image, error) {
	return k.load(ctx, id, nil)
}

// load is Load, copying the record as its Image is read into spool, when
// not nil, from spool's start (Payload.Spooled).
func (k *Keeper) load(ctx context.Context, id string, spool *os.File) (Meta, *supervisor.Image, error) {
	latestSeq, prevSeq, err := k.store.Seqs(ctx, id)
	if err != nil {
		return Meta{}, nil, err
	}
	var errs []error
	found := false
	for i, previous := range []bool{false, true} {
		// The previous record only when the latest fails: one in memory.
		rec, err := k.store.Get(ctx, id, previous)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return Meta{}, nil, err
		}
		if rec == nil && err == nil {
			continue
		}
		found = true
		var m Meta
		var p *Payload
		if err == nil {
			var to io.Writer
			if spool != nil {
				to = io.NewOffsetWriter(spool, 0) // over what a record that failed left
			}
			m, p, err = openSpooled(rec, k.max, func(sha string) []byte {
				if b, have := k.baseNow(ctx); have == sha {
					return b
				}
				return nil
			}, k.key, to)
			if err != nil {
				_ = rec.Close()
			}
		}
		if err == nil && m.Session != id {
			err = fmt.Errorf("%w: it is session %s's", ErrCorrupt, m.Session)
		}
		if err == nil {
			err = checkSeq(m, []uint64{latestSeq, prevSeq}[i])
		}
		if err != nil {
			if p != nil {
				p.Close()
			}
			k.log.Warn("a checkpoint of a session cannot be used", "session_id", id, "error", err.Error())
			errs = append(errs, err)
			continue
		}
		// Decoded as the worker's start reads it (supervisor.writeImage),
		// which releases the record at its end (and Restore, after a
		// start that failed before).
		return m, &supervisor.Image{Mem: m.Mem, FS: m.FS, Clock: m.Clock, Namespace: m.Namespace, R: p}, nil
	}
	if !found {
		return Meta{}, nil, fmt.Errorf("session %s has no checkpoint", id)
	}
	return Meta{}, nil, fmt.Errorf("no intact checkpoint of session %s: %w", id, errors.Join(errs...))
}

// Delete implements sessions.Checkpointer: with the session's lease, which
// it takes if it does not hold it (another instance may serve the session).
func (k *Keeper) Delete(ctx context.Context, id string) error {
	k.forget(id)
	l, ok := k.lease(id)
	if !ok {
		if err := k.Hold(ctx, id, ""); err != nil {
			return err
		}
		l, _ = k.lease(id)
	}
	k.mu.Lock()
	delete(k.leases, id)
	k.mu.Unlock()
	return k.store.Delete(ctx, id, l)
}

// Fork implements sessions.Checkpointer: a new worker from a checkpoint of
// w taken now, which is not stored. The checkpoint goes through a file in
// the Keeper's private folder, as a record does.
func (k *Keeper) Fork(ctx context.Context, w sessions.Worker, exited func()) (sessions.Worker, error) {
	var img supervisor.Image
	spool, err := k.recordFile(func(f *os.File) error {
		return w.Checkpoint(ctx, func(from *supervisor.Image) error {
			img = *from
			n, err := io.Copy(f, from.R)
			if err == nil && n != from.Mem+from.FS {
				err = fmt.Errorf("the checkpoint has %d bytes, not %d", n, from.Mem+from.FS)
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	defer spool.close()
	img.R = io.NewSectionReader(spool.f, 0, spool.size)
	return k.pool.StartRestored(ctx, &img, k.tmp, exited)
}

// List implements sessions.Checkpointer: each session's latest intact
// record's description.
func (k *Keeper) List(ctx context.Context) ([]sessions.Saved, error) {
	keys, err := k.store.Keys(ctx)
	if err != nil {
		return nil, err
	}
	var out []sessions.Saved
	for _, key := range keys {
		for _, previous := range []bool{false, true} {
			// One record at a time, the previous only when the latest fails.
			rec, err := k.store.Get(ctx, key, previous)
			if errors.Is(err, ErrCorrupt) {
				// One bad entry (a file that is not a record) leaves the others.
				k.log.Warn("a checkpoint of a session cannot be used", "session_id", key, "error", err.Error())
				continue
			}
			if err != nil {
				return nil, err
			}
			if rec == nil {
				continue
			}
			m, _, err := ReadRecordMeta(rec, k.key)
			_ = rec.Close()
			if err == nil && m.Session == key {
				out = append(out, savedOf(m))
				break
			}
		}
	}
	return out, nil
}

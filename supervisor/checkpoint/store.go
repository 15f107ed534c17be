package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// Store holds checkpoint records by key (a session id): the latest and the
// one before it, so that a damaged latest record still leaves an intact
// older one.
type Store interface {
	// Put makes data the latest record of key; the latest becomes the
	// previous. A failure or crash leaves the records as they were, or
	// with data as the latest: never a partial record. fence must be the
	// key's lease in force (lease.go), or Put fails with ErrLeaseLost and
	// writes nothing. seq is data's sequence number (auth.go): it must be
	// past the latest's the store has seen, or Put fails with ErrReplay.
	// A dir: store copies data's bytes file to file; pyrun does not hold
	// them (docs/performance.md).
	Put(ctx context.Context, key string, data Record, seq uint64, fence Lease) error
	// Get returns key's latest record, or with previous the one before
	// it; nil when it has none. One at a time: a restore reads the
	// previous record only when the latest fails its checks. A dir:
	// store's is its file, read as it is used, so that pyrun does not
	// hold the record (docs/performance.md).
	Get(ctx context.Context, key string, previous bool) (Record, error)
	// Seqs returns the sequence numbers Put gave key's latest and previous
	// records (0: none; a store that lost them says 0).
	Seqs(ctx context.Context, key string) (latest, previous uint64, err error)
	// Delete removes key's records and its lease, if fence is the lease in
	// force (else ErrLeaseLost).
	Delete(ctx context.Context, key string, fence Lease) error
	// Keys lists the keys with records.
	Keys(ctx context.Context) ([]string, error)
	// Acquire takes key's lease for holder for ttl: a new generation
	// when it was free or expired, the same one when holder has it
	// already. A *HeldError when another holder has it.
	Acquire(ctx context.Context, key, holder string, ttl time.Duration) (Lease, error)
	// Renew extends l, the lease in force, by ttl from now, and says
	// whether another instance asked for the key (WantMove). ErrLeaseLost
	// when l is not in force.
	Renew(ctx context.Context, key string, l Lease, ttl time.Duration) (move bool, err error)
	// Release frees l, if it is in force.
	Release(ctx context.Context, key string, l Lease) error
	// WantMove asks the holder of key's lease, if any, to hand it over.
	WantMove(ctx context.Context, key string) error
	// Close releases the store.
	Close() error
}

// A Record is a checkpoint record as a store gives it: Size bytes, read
// with ReadAt until Close.
type Record interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// bytesRecord is a record in memory.
type bytesRecord struct{ *bytes.Reader }

func (bytesRecord) Close() error { return nil }

// NewRecord is a Record of b.
func NewRecord(b []byte) Record { return bytesRecord{bytes.NewReader(b)} }

// fileRecord is a record's file, open; its size is the one it had when
// opened (files are replaced by rename, never written in place).
type fileRecord struct {
	*os.File
	size int64
}

func (f fileRecord) Size() int64 { return f.size }

// validKey: session ids are an instance name, a dot and hex.
var validKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)

func checkKey(key string) error {
	if !validKey.MatchString(key) || strings.Contains(key, "..") {
		return fmt.Errorf("bad checkpoint key %q", key)
	}
	return nil
}

// Dir is a Store in a folder of the local file system (--session-store
// dir:PATH): KEY.ckpt and KEY.prev.ckpt, written to a temporary file,
// synced and renamed into place, KEY.seq (their sequence numbers), and
// KEY.lease (lease.go). Processes that
// share the folder (on one machine) take turns through flock. It reads
// regular files only, each within a bound (readRegular).
type Dir struct {
	path      string
	maxRecord int64 // the largest record file read (MaxRecord)
}

// OpenDir opens (and makes, private to pyrun's user) a folder store. maxRaw
// bounds a checkpoint's raw bytes (--max-checkpoint; 0: the default): a
// record file larger than such a checkpoint's record can be is not read.
func OpenDir(path string, maxRaw int64) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("session store %s: %w", path, err)
	}
	return &Dir{path: path, maxRecord: MaxRecord(maxRaw)}, nil
}

// MaxRecord is the most bytes a record of a checkpoint of maxRaw raw bytes
// takes (0: supervisor.DefaultMaxCheckpoint): zstd adds 3 bytes to each
// 128 KiB it cannot compress, and the header is a few hundred bytes.
func MaxRecord(maxRaw int64) int64 {
	if maxRaw <= 0 {
		maxRaw = supervisor.DefaultMaxCheckpoint
	}
	return maxRaw + maxRaw/1024 + 1<<20
}

// maxSmallFile bounds the files of a dir: store other than records (a
// lease's JSON).
const maxSmallFile = 64 << 10

// kindOf names the type of a file that is not a regular one.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a folder"
	}
	return "of type " + m.Type().String()
}

// readRegular reads the file at path, if it is a regular file of at most
// max bytes; nil, nil when there is none. Anything else in the folder (a
// named pipe, whose open or read would wait for a writer for good; a
// device; a symbolic link; a file past the bound) is refused with an error
// that wraps ErrCorrupt, without reading it: O_NONBLOCK makes the open of
// a pipe return at once, O_NOFOLLOW refuses a link, and the type and size
// are those of the file opened (fstat), not of a name that may change.
func readRegular(path string, max int64) ([]byte, error) {
	return readBounded(path, max, noFollow)
}

// openRegular opens the regular file at path for reading, as readRegular
// reads it: nil when there is none, an error wrapping ErrCorrupt for what
// is not a regular file within max bytes.
func openRegular(path string, max int64) (Record, error) {
	f, err := openChecked(path, max, noFollow)
	if f == nil || err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return fileRecord{f, st.Size()}, nil
}

// readBounded is readRegular with the open's flags beside O_RDONLY and
// O_NONBLOCK (without O_NOFOLLOW: a link to a regular file is followed).
func readBounded(path string, max int64, flags int) ([]byte, error) {
	f, err := openChecked(path, max, flags)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Files are replaced by rename, never written in place: the file open
	// keeps the size it had.
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// openChecked opens path as readBounded reads it: nil, nil when there is
// no such file.
func openChecked(path string, max int64, flags int) (*os.File, error) {
	f, err := openRead(path, flags)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symbolic link, not a file", ErrCorrupt, path)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, err
	case !st.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("%w: %s is %s, not a regular file", ErrCorrupt, path, kindOf(st.Mode()))
	case st.Size() > max:
		f.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, past the %d such a file can be", ErrCorrupt, path, st.Size(), max)
	}
	return f, nil
}

const (
	latestExt = ".ckpt"
	prevExt   = ".prev.ckpt"
	seqExt    = ".seq"
)

// seqRecord is a dir: store's KEY.seq file.
type seqRecord struct {
	Latest   uint64 `json:"latest"`
	Previous uint64 `json:"previous"`
}

// readSeqs reads key's sequence numbers; zero when there are none or they
// cannot be read.
func (d *Dir) readSeqs(key string) seqRecord {
	var r seqRecord
	if b, err := readRegular(filepath.Join(d.path, key+seqExt), maxSmallFile); err == nil && b != nil {
		_ = json.Unmarshal(b, &r)
	}
	return r
}

// writeSeqs replaces key's sequence numbers (under the lease lock).
func (d *Dir) writeSeqs(key string, r seqRecord) error {
	b, _ := json.Marshal(r)
	tmp := filepath.Join(d.path, ".tmp-seq-"+key)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|noFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(d.path, key+seqExt))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func (d *Dir) Seqs(_ context.Context, key string) (latest, previous uint64, err error) {
	if err := checkKey(key); err != nil {
		return 0, 0, err
	}
	r := d.readSeqs(key)
	return r.Latest, r.Previous, nil
}

func (d *Dir) Put(ctx context.Context, key string, data Record, seq uint64, fence Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.path, ".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	tmp := f.Name()
	_, err = io.Copy(f, io.NewSectionReader(data, 0, data.Size()))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	// The records are replaced under the lease lock, so that a lease taken
	// by another instance meanwhile refuses this write.
	return d.lockLeases(func() error {
		if !d.readLease(key).holds(fence, time.Now()) {
			os.Remove(tmp)
			return fmt.Errorf("write checkpoint: %w", ErrLeaseLost)
		}
		seqs := d.readSeqs(key)
		if seq <= seqs.Latest {
			os.Remove(tmp)
			return fmt.Errorf("write checkpoint: %w: record %d, the store has %d", ErrReplay, seq, seqs.Latest)
		}
		latest := filepath.Join(d.path, key+latestExt)
		if err := os.Rename(latest, filepath.Join(d.path, key+prevExt)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			os.Remove(tmp)
			return fmt.Errorf("write checkpoint: %w", err)
		}
		if err := os.Rename(tmp, latest); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("write checkpoint: %w", err)
		}
		// After the records: a crash between leaves a latest newer than
		// the numbers say, which a read keeps (checkSeq).
		if err := d.writeSeqs(key, seqRecord{Latest: seq, Previous: seqs.Latest}); err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
		return syncDir(d.path)
	})
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d *Dir) Get(ctx context.Context, key string, previous bool) (Record, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	name := key + latestExt
	if previous {
		name = key + prevExt
	}
	rec, err := openRegular(filepath.Join(d.path, name), d.maxRecord)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return rec, nil
}

func (d *Dir) Delete(ctx context.Context, key string, fence Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return d.lockLeases(func() error {
		if !d.readLease(key).holds(fence, time.Now()) {
			return fmt.Errorf("delete checkpoint: %w", ErrLeaseLost)
		}
		var errs []error
		for _, ext := range []string{latestExt, prevExt, seqExt, leaseExt} {
			if err := os.Remove(filepath.Join(d.path, key+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

func (d *Dir) Keys(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, prevExt) || !strings.HasSuffix(n, latestExt) || strings.HasPrefix(n, ".") {
			continue
		}
		keys = append(keys, strings.TrimSuffix(n, latestExt))
	}
	return keys, nil
}

func (d *Dir) Close() error { return nil }

// Package checkpoint keeps sessions' checkpoints (docs/sessions.md, Durable
// sessions): their format (compressed, deduplicated against the base memory
// snapshot, authenticated: auth.go), the stores that hold them (a folder; Redis), and
// the Keeper that takes and restores them for package sessions.
package checkpoint

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// A checkpoint record:
//
//	"PYRUNCK2" | u32 header length | JSON header | zstd(payload) | HMAC-SHA256 of all before
//
// under the store's key (auth.go). PYRUNCK1 records, checksummed with a
// plain SHA-256, are refused: anyone could make one.
//
// The payload is the memory snapshot's own header, then its heap XORed
// with the base snapshot's heap at the same offsets (addresses are stable,
// so a session's heap differs from the base in few bytes: docs/sessions.md),
// then the files' blob. pyrun writes it as a zstd frame per chunk
// (stream.go), the heap's at its chunks, which decode as one stream, as
// records of one frame, which pyrun wrote before, still do.

var (
	magic    = []byte("PYRUNCK2")
	oldMagic = []byte("PYRUNCK1")
)

// ErrCorrupt wraps the error of a record that fails its checks.
var ErrCorrupt = errors.New("the checkpoint is damaged")

// Meta describes a checkpoint.
type Meta struct {
	Session string `json:"session"`
	Owner   string `json:"owner"`
	// Seq numbers the session's records, from 1: each one past the newest
	// the store had (auth.go).
	Seq       uint64    `json:"seq"`
	AfterCall int       `json:"after_call"` // the session's calls it covers
	Taken     time.Time `json:"taken"`
	Started   time.Time `json:"started"`   // when the session started
	LastUsed  time.Time `json:"last_used"` // its last call's end
	Clock     float64   `json:"clock"`
	// Namespace: a checkpoint of a shared session worker taken for the
	// session of that namespace, the only one a restore keeps; "": the
	// worker is the session's own.
	Namespace string `json:"namespace,omitempty"`
	Mem       int64  `json:"mem"`
	FS        int64  `json:"fs"`
	// Base is the SHA-256 of the snapshot the heap is a difference from;
	// "": none (the heap as it is).
	Base    string `json:"base"`
	HeapOff int64  `json:"heap_off"`
}

// heapOffset is where a Pyodide memory snapshot's heap starts: its second
// little-endian u32.
func heapOffset(mem []byte) (int, error) {
	if len(mem) < 8 {
		return 0, errors.New("memory snapshot too short")
	}
	off := int(binary.LittleEndian.Uint32(mem[4:8]))
	if off > len(mem) {
		return 0, fmt.Errorf("memory snapshot's heap offset %d past its end %d", off, len(mem))
	}
	return off, nil
}

// maxWindow bounds the zstd window a record may ask its decoder to keep
// (memory beside the payload's own): pyrun writes frames of a chunk
// (stream.go's chunkSize), and wrote 2 MiB windows before (8 MiB before
// that), or the payload's size when that is smaller.
const maxWindow = 16 << 20

// Encode makes a record of mem and files, authenticated with key
// (EncodeTo, in memory). base, when not nil, is the base snapshot (baseSHA
// its SHA-256): the heap is kept as a difference from it.
func Encode(meta Meta, mem, files, base []byte, baseSHA string, key []byte) ([]byte, error) {
	var out bytes.Buffer
	src := io.MultiReader(bytes.NewReader(mem), bytes.NewReader(files))
	if _, err := EncodeTo(&out, meta, int64(len(mem)), int64(len(files)), src, base, baseSHA, key); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Reheader is rec with meta's header instead (ReheaderTo, in memory).
func Reheader(rec []byte, meta Meta, key []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := ReheaderTo(&out, NewRecord(rec), meta, key); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ReadMeta checks a record's authentication under key and returns its
// header.
func ReadMeta(rec []byte, key []byte) (Meta, error) {
	m, _, err := ReadRecordMeta(NewRecord(rec), key)
	return m, err
}

// macChunk is how much of a record its authentication reads at a time.
const macChunk = 1 << 20

// ReadRecordMeta checks rec's authentication under key, reading it a MiB
// at a time, and returns its header and where its payload starts.
func ReadRecordMeta(rec Record, key []byte) (Meta, int64, error) {
	var m Meta
	size := rec.Size()
	head := make([]byte, min(size, int64(len(magic)+4)))
	if _, err := rec.ReadAt(head, 0); err != nil {
		return m, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if bytes.HasPrefix(head, oldMagic) {
		return m, 0, fmt.Errorf("%w: it was written by an older pyrun, without authentication", ErrCorrupt)
	}
	if size < int64(len(magic)+4+sha256.Size) || !bytes.HasPrefix(head, magic) {
		return m, 0, fmt.Errorf("%w: not a pyrun checkpoint", ErrCorrupt)
	}
	body := size - sha256.Size
	mac := newMAC(key)
	if _, err := io.CopyBuffer(mac, io.NewSectionReader(rec, 0, body), make([]byte, min(body, macChunk))); err != nil {
		return m, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	want := make([]byte, sha256.Size)
	if _, err := rec.ReadAt(want, body); err != nil {
		return m, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if !hmac.Equal(mac.Sum(nil), want) {
		return m, 0, fmt.Errorf("%w: its authentication does not match (damaged, or not written with this store's key)", ErrCorrupt)
	}
	n := int64(binary.LittleEndian.Uint32(head[len(magic):]))
	start := int64(len(magic)+4) + n
	if start > body {
		return m, 0, fmt.Errorf("%w: header past its end", ErrCorrupt)
	}
	hdr := make([]byte, n)
	if _, err := rec.ReadAt(hdr, int64(len(magic)+4)); err != nil {
		return m, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(hdr, &m); err != nil {
		return m, 0, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return m, start, nil
}

// Decode checks a record's authentication under key and returns its
// memory snapshot and files (Open, read whole).
func Decode(rec []byte, maxRaw int64, base func(sha string) []byte, key []byte) (Meta, []byte, []byte, error) {
	m, p, err := Open(NewRecord(rec), maxRaw, base, key)
	if err != nil {
		return m, nil, nil, err
	}
	payload := make([]byte, m.Mem+m.FS)
	if _, err := io.ReadFull(p, payload); err != nil {
		p.Close()
		return m, nil, nil, err
	}
	if _, err := p.Read(nil); err != io.EOF {
		return m, nil, nil, err
	}
	return m, payload[:m.Mem:m.Mem], payload[m.Mem:], nil
}

// Open checks a record's authentication under key and its header, and
// returns a reader of its payload: the memory snapshot (its heap XORed
// back with the base snapshot's, which base gives for a SHA-256, nil when
// it is not to be had), then the files. maxRaw bounds the payload
// (--max-checkpoint): a record that declares more is refused. The reader
// decodes as it is read, so a restore holds the record and some MiB, not
// the state besides (docs/performance.md); it gives exactly the declared
// bytes, and fails with an error wrapping ErrCorrupt on a payload that is
// shorter or expands past them, which costs no more than the decoder's
// window (maxWindow). Such a payload has passed the authentication: only
// pyrun, with the key, writes one.
func Open(rec Record, maxRaw int64, base func(sha string) []byte, key []byte) (Meta, *Payload, error) {
	return openSpooled(rec, maxRaw, base, key, nil)
}

// openSpooled is Open, writing to spool, when not nil, the record's bytes
// as the payload reads and authenticates them: at the payload's end
// without error, spool has the record as it was authenticated (Spooled),
// however the record's file changed meanwhile.
func openSpooled(rec Record, maxRaw int64, base func(sha string) []byte, key []byte, spool io.Writer) (Meta, *Payload, error) {
	m, start, err := ReadRecordMeta(rec, key)
	if err != nil {
		return m, nil, err
	}
	if m.Mem < 8 || m.FS < 0 || m.Mem > maxRaw || m.FS > maxRaw-m.Mem {
		return m, nil, fmt.Errorf("%w: it declares %d + %d bytes, past the bound of %d (--max-checkpoint)", ErrCorrupt, m.Mem, m.FS, maxRaw)
	}
	if m.HeapOff < 0 || m.HeapOff > m.Mem {
		return m, nil, fmt.Errorf("%w: its heap offset %d is past its memory's %d bytes", ErrCorrupt, m.HeapOff, m.Mem)
	}
	p := &Payload{n: m.Mem + m.FS, heapOff: m.HeapOff, mem: m.Mem}
	if m.Base != "" {
		b := base(m.Base)
		if b == nil {
			return m, nil, fmt.Errorf("the checkpoint was made against base snapshot %.12s, which this pyrun does not have (another pyrun version?)", m.Base)
		}
		boff, err := heapOffset(b)
		if err != nil {
			return m, nil, fmt.Errorf("base: %w", err)
		}
		p.base = b[boff:]
	}
	// The authentication is checked again as the payload is read: a file
	// changed in place since (which pyrun never does) fails the read at
	// its end, before a worker starts from what it gave.
	body := rec.Size() - sha256.Size
	p.rec, p.body, p.start, p.mac, p.spool = rec, body, start, newMAC(key), spool
	head := make([]byte, start)
	if _, err := rec.ReadAt(head, 0); err != nil {
		return m, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	_, _ = (*payloadSink)(p).Write(head)
	z := io.TeeReader(io.NewSectionReader(rec, start, body-start), (*payloadSink)(p))
	p.z = z
	p.d, err = zstd.NewReader(z, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return m, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, p, nil
}

// Payload reads a record's payload, decoded (Open). Synchronous: its
// decoder starts no goroutine (concurrency 1), and is released at the end
// of the payload or at its first error.
type Payload struct {
	rec     Record
	body    int64     // where rec's authentication starts
	start   int64     // where its payload starts
	mac     hash.Hash // of what was read of rec, as it is read
	z       io.Reader // rec's compressed payload, into mac
	d       *zstd.Decoder
	n, pos  int64 // the declared bytes, and those given
	heapOff int64 // where the heap starts, and ends (mem)
	mem     int64
	base    []byte // the base snapshot's heap; nil: none
	err     error
	// spool, when not nil, is given what mac is (openSpooled); spoolErr
	// is its first error, after which it is given nothing.
	spool    io.Writer
	spoolErr error
}

// payloadSink is where a Payload's record bytes go as they are read: its
// authentication and its spool.
type payloadSink Payload

func (s *payloadSink) Write(b []byte) (int, error) {
	s.mac.Write(b)
	if s.spool != nil && s.spoolErr == nil {
		if _, err := s.spool.Write(b); err != nil {
			s.spoolErr = err
		}
	}
	return len(b), nil
}

// Spooled says whether the spool (openSpooled) holds the whole record, as
// authenticated: only after the payload was read to its end.
func (p *Payload) Spooled() error {
	switch {
	case p.spool == nil:
		return errors.New("the record was not spooled")
	case p.spoolErr != nil:
		return fmt.Errorf("spool the record: %w", p.spoolErr)
	case p.err != io.EOF:
		return errors.New("the record was not read to its end")
	}
	return nil
}

func (p *Payload) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.pos == p.n {
		// The payload must end here.
		var one [1]byte
		switch _, err := io.ReadFull(p.d, one[:]); {
		case err == nil:
			return 0, p.fail(fmt.Errorf("%w: its payload expands past the %d bytes it declares", ErrCorrupt, p.n))
		case !errors.Is(err, io.EOF):
			return 0, p.fail(fmt.Errorf("%w: %w", ErrCorrupt, err))
		}
		// What the decoder left of the compressed bytes, then the MAC.
		if _, err := io.Copy(io.Discard, p.z); err != nil {
			return 0, p.fail(fmt.Errorf("read checkpoint: %w", err))
		}
		want := make([]byte, sha256.Size)
		if _, err := p.rec.ReadAt(want, p.body); err != nil {
			return 0, p.fail(fmt.Errorf("read checkpoint: %w", err))
		}
		if !hmac.Equal(p.mac.Sum(nil), want) {
			return 0, p.fail(fmt.Errorf("%w: it changed while it was read", ErrCorrupt))
		}
		if p.spool != nil && p.spoolErr == nil {
			_, p.spoolErr = p.spool.Write(want)
		}
		return 0, p.fail(io.EOF)
	}
	b = b[:min(int64(len(b)), p.n-p.pos)]
	k, err := p.d.Read(b)
	p.xor(b[:k])
	p.pos += int64(k)
	switch {
	case errors.Is(err, io.EOF) && p.pos < p.n:
		return k, p.fail(fmt.Errorf("%w: its payload is %d bytes, not the %d it declares", ErrCorrupt, p.pos, p.n))
	case err != nil && !errors.Is(err, io.EOF):
		return k, p.fail(fmt.Errorf("%w: %w", ErrCorrupt, err))
	}
	return k, nil
}

// xor undoes the difference from the base in b, the payload's bytes from
// p.pos: those of the heap that the base has too.
func (p *Payload) xor(b []byte) {
	lo := max(p.pos, p.heapOff)
	hi := min(p.pos+int64(len(b)), p.mem, p.heapOff+int64(len(p.base)))
	if p.base == nil || lo >= hi {
		return
	}
	dst := b[lo-p.pos : hi-p.pos]
	subtle.XORBytes(dst, dst, p.base[lo-p.heapOff:hi-p.heapOff])
}

// fail ends p with err, releasing its decoder and its record.
func (p *Payload) fail(err error) error {
	p.err = err
	p.d.Close()
	p.base = nil
	_ = p.rec.Close()
	return err
}

// Close releases p before its end (a reader that stops early); after its
// end, or twice, it does nothing.
func (p *Payload) Close() {
	if p.err == nil {
		p.fail(errors.New("the checkpoint's payload was closed"))
	}
}

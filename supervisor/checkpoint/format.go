// Package checkpoint keeps sessions' checkpoints (docs/sessions.md, Durable
// sessions): their format (compressed, deduplicated against the base memory
// snapshot, authenticated: auth.go), the stores that hold them (a folder; Redis), and
// the Keeper that takes and restores them for package sessions.
package checkpoint

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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

// xorHeap XORs dst's heap (from off) with base's heap in place, over the
// bytes both have.
func xorHeap(dst []byte, off int, base []byte) error {
	boff, err := heapOffset(base)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	a, b := dst[off:], base[boff:]
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(a[i:], x)
	}
	for ; i < n; i++ {
		a[i] ^= b[i]
	}
	return nil
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
	if err := ReheaderTo(&out, rec, meta, key); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ReadMeta checks a record's authentication under key and returns its
// header.
func ReadMeta(rec []byte, key []byte) (Meta, error) {
	var m Meta
	if len(rec) >= len(oldMagic) && bytes.Equal(rec[:len(oldMagic)], oldMagic) {
		return m, fmt.Errorf("%w: it was written by an older pyrun, without authentication", ErrCorrupt)
	}
	if len(rec) < len(magic)+4+sha256.Size || !bytes.Equal(rec[:len(magic)], magic) {
		return m, fmt.Errorf("%w: not a pyrun checkpoint", ErrCorrupt)
	}
	body := rec[:len(rec)-sha256.Size]
	if !hmac.Equal(sumOf(key, body), rec[len(body):]) {
		return m, fmt.Errorf("%w: its authentication does not match (damaged, or not written with this store's key)", ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(rec[len(magic):]))
	start := len(magic) + 4
	if start+n > len(body) {
		return m, fmt.Errorf("%w: header past its end", ErrCorrupt)
	}
	if err := json.Unmarshal(body[start:start+n], &m); err != nil {
		return m, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return m, nil
}

// Decode checks a record's authentication under key and returns its memory snapshot and files. base
// gives the base snapshot of a SHA-256 (nil when it is not to be had).
// maxRaw bounds the payload (--max-checkpoint): a record that declares more,
// or whose payload expands past what it declares, is refused, and no more
// than the declared size is ever allocated for it.
func Decode(rec []byte, maxRaw int64, base func(sha string) []byte, key []byte) (Meta, []byte, []byte, error) {
	m, err := ReadMeta(rec, key)
	if err != nil {
		return m, nil, nil, err
	}
	if m.Mem < 8 || m.FS < 0 || m.Mem > maxRaw || m.FS > maxRaw-m.Mem {
		return m, nil, nil, fmt.Errorf("%w: it declares %d + %d bytes, past the bound of %d (--max-checkpoint)", ErrCorrupt, m.Mem, m.FS, maxRaw)
	}
	start := len(magic) + 4 + int(binary.LittleEndian.Uint32(rec[len(magic):]))
	payload, err := decompress(rec[start:len(rec)-sha256.Size], m.Mem+m.FS)
	if err != nil {
		return m, nil, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	mem, files := payload[:m.Mem:m.Mem], payload[m.Mem:]
	if m.Base != "" {
		b := base(m.Base)
		if b == nil {
			return m, nil, nil, fmt.Errorf("the checkpoint was made against base snapshot %.12s, which this pyrun does not have (another pyrun version?)", m.Base)
		}
		if err := xorHeap(mem, int(m.HeapOff), b); err != nil {
			return m, nil, nil, err
		}
	}
	return m, mem, files, nil
}

// decompress decodes z, which must be exactly n bytes, into a buffer of n
// bytes: it stops at the first byte past n, so a payload that expands to
// gigabytes costs no more than n (and the decoder's window, maxWindow).
func decompress(z []byte, n int64) ([]byte, error) {
	d, err := zstd.NewReader(bytes.NewReader(z), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out := make([]byte, n)
	switch got, err := io.ReadFull(d, out); {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return nil, fmt.Errorf("its payload is %d bytes, not the %d it declares", got, n)
	case err != nil:
		return nil, err
	}
	var one [1]byte
	switch _, err := io.ReadFull(d, one[:]); {
	case err == nil:
		return nil, fmt.Errorf("its payload expands past the %d bytes it declares", n)
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	return out, nil
}

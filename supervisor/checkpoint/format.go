// Package checkpoint keeps sessions' checkpoints (docs/sessions.md, Durable
// sessions): their format (compressed, deduplicated against the base memory
// snapshot, checksummed), the stores that hold them (a folder; Redis), and
// the Keeper that takes and restores them for package sessions.
package checkpoint

import (
	"bytes"
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
//	"PYRUNCK1" | u32 header length | JSON header | zstd(payload) | SHA-256 of all before
//
// The payload is the memory snapshot's own header, then its heap XORed
// with the base snapshot's heap at the same offsets (addresses are stable,
// so a session's heap differs from the base in few bytes: docs/sessions.md),
// then the files' blob.

var magic = []byte("PYRUNCK1")

// ErrCorrupt wraps the error of a record that fails its checks.
var ErrCorrupt = errors.New("the checkpoint is damaged")

// Meta describes a checkpoint.
type Meta struct {
	Session   string    `json:"session"`
	Owner     string    `json:"owner"`
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

var decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(8<<30))

// Encode makes a record of mem and files (EncodeTo, in memory). base, when
// not nil, is the base snapshot (baseSHA its SHA-256): the heap is kept as
// a difference from it.
func Encode(meta Meta, mem, files, base []byte, baseSHA string) ([]byte, error) {
	var out bytes.Buffer
	src := io.MultiReader(bytes.NewReader(mem), bytes.NewReader(files))
	if _, err := EncodeTo(&out, meta, int64(len(mem)), int64(len(files)), src, base, baseSHA); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Reheader is rec with meta's header instead (ReheaderTo, in memory).
func Reheader(rec []byte, meta Meta) ([]byte, error) {
	var out bytes.Buffer
	if err := ReheaderTo(&out, rec, meta); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ReadMeta checks a record's checksum and returns its header.
func ReadMeta(rec []byte) (Meta, error) {
	var m Meta
	if len(rec) < len(magic)+4+sha256.Size || !bytes.Equal(rec[:len(magic)], magic) {
		return m, fmt.Errorf("%w: not a pyrun checkpoint", ErrCorrupt)
	}
	body := rec[:len(rec)-sha256.Size]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], rec[len(body):]) {
		return m, fmt.Errorf("%w: its checksum does not match", ErrCorrupt)
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

// Decode checks a record and returns its memory snapshot and files. base
// gives the base snapshot of a SHA-256 (nil when it is not to be had).
func Decode(rec []byte, maxRaw int64, base func(sha string) []byte) (Meta, []byte, []byte, error) {
	m, err := ReadMeta(rec)
	if err != nil {
		return m, nil, nil, err
	}
	if m.Mem < 8 || m.FS < 0 || m.Mem+m.FS > maxRaw {
		return m, nil, nil, fmt.Errorf("%w: sizes %d + %d", ErrCorrupt, m.Mem, m.FS)
	}
	start := len(magic) + 4 + int(binary.LittleEndian.Uint32(rec[len(magic):]))
	payload, err := decoder.DecodeAll(rec[start:len(rec)-sha256.Size], make([]byte, 0, m.Mem+m.FS))
	if err != nil {
		return m, nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if int64(len(payload)) != m.Mem+m.FS {
		return m, nil, nil, fmt.Errorf("%w: %d bytes, not %d", ErrCorrupt, len(payload), m.Mem+m.FS)
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

package checkpoint

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Records are written as a stream (format.go has their layout): the state
// is read, XORed with the base and compressed a chunk at a time, and the
// authentication code is taken of what is written, so that a checkpoint costs pyrun
// its buffers rather than copies of the state (issue 36: a 150 MiB session
// took pyrun from 372 to 1016 MiB).

// chunkSize is how much of the state is read and XORed at a time.
const chunkSize = 1 << 20

// encoderWindow bounds the compressor's memory: a heap XORed with its base
// is mostly zeros, which any window compresses, and random bytes no window
// does.
const encoderWindow = 2 << 20

// encoders keeps the stream compressors between checkpoints: each holds
// some MiB of buffers.
var encoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(encoderWindow), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(err) // only for options out of range
	}
	return e
}}

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// summed writes to w and to the record's authentication code, and counts.
type summed struct {
	w   io.Writer
	sum hash.Hash
	n   int64
}

func (s *summed) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.sum.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// writeHead writes a record's magic and meta's header.
func writeHead(w io.Writer, meta Meta) error {
	hdr, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	head := make([]byte, 0, len(magic)+4+len(hdr))
	head = append(head, magic...)
	head = binary.LittleEndian.AppendUint32(head, uint32(len(hdr)))
	_, err = w.Write(append(head, hdr...))
	return err
}

// EncodeTo writes to w the record of a checkpoint that src gives: mem bytes
// of memory snapshot, then fs bytes of files. base, when not nil, is the
// base snapshot (baseSHA its SHA-256): the heap is kept as a difference from
// it. It reads, XORs and compresses a chunk at a time, authenticates the
// record under key (auth.go), and returns the record's size.
func EncodeTo(w io.Writer, meta Meta, mem, fs int64, src io.Reader, base []byte, baseSHA string, key []byte) (int64, error) {
	if mem < 8 || fs < 0 {
		return 0, fmt.Errorf("a checkpoint of %d + %d bytes", mem, fs)
	}
	buf := chunks.Get().(*[chunkSize]byte)
	defer chunks.Put(buf)
	first := buf[:min(int64(chunkSize), mem+fs)]
	if _, err := io.ReadFull(src, first); err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	off := int64(binary.LittleEndian.Uint32(first[4:8]))
	if off > mem {
		return 0, fmt.Errorf("memory snapshot's heap offset %d past its end %d", off, mem)
	}
	var baseHeap []byte
	meta.Mem, meta.FS, meta.HeapOff, meta.Base = mem, fs, off, ""
	if base != nil {
		boff, err := heapOffset(base)
		if err != nil {
			return 0, fmt.Errorf("base: %w", err)
		}
		baseHeap, meta.Base = base[boff:], baseSHA
	}
	out := &summed{w: w, sum: newMAC(key)}
	if err := writeHead(out, meta); err != nil {
		return 0, err
	}
	enc := encoders.Get().(*zstd.Encoder)
	defer encoders.Put(enc)
	enc.ResetContentSize(out, mem+fs)
	defer enc.Reset(nil) // lets go of w
	chunk, pos := first, int64(0)
	for {
		// The heap's bytes in this chunk, those the base has too.
		if from, to := max(pos, off), min(pos+int64(len(chunk)), mem, off+int64(len(baseHeap))); from < to {
			c := chunk[from-pos : to-pos]
			subtle.XORBytes(c, c, baseHeap[from-off:to-off])
		}
		if _, err := enc.Write(chunk); err != nil {
			return 0, fmt.Errorf("compress checkpoint: %w", err)
		}
		pos += int64(len(chunk))
		if pos == mem+fs {
			break
		}
		chunk = buf[:min(int64(chunkSize), mem+fs-pos)]
		if _, err := io.ReadFull(src, chunk); err != nil {
			return 0, fmt.Errorf("read checkpoint: %w", err)
		}
	}
	if err := enc.Close(); err != nil {
		return 0, fmt.Errorf("compress checkpoint: %w", err)
	}
	if _, err := w.Write(out.sum.Sum(nil)); err != nil {
		return 0, err
	}
	return out.n + int64(out.sum.Size()), nil
}

// ReheaderTo writes to w rec, a record EncodeTo made, with meta's header
// instead (its sizes and base kept): the same state kept as another
// session's record, without compressing it again (a shared session
// worker's checkpoint, docs/sessions.md).
func ReheaderTo(w io.Writer, rec []byte, meta Meta, key []byte) error {
	old, err := ReadMeta(rec, key)
	if err != nil {
		return err
	}
	meta.Mem, meta.FS, meta.HeapOff, meta.Base = old.Mem, old.FS, old.HeapOff, old.Base
	out := &summed{w: w, sum: newMAC(key)}
	if err := writeHead(out, meta); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint32(rec[len(magic):]))
	if _, err := out.Write(rec[len(magic)+4+n : len(rec)-sha256.Size]); err != nil {
		return err
	}
	_, err = w.Write(out.sum.Sum(nil))
	return err
}

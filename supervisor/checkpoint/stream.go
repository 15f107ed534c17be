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

	"github.com/pyrun/pyrun/supervisor"
)

// Records are written as a stream (format.go has their layout): the state
// is read, XORed with the base and compressed a chunk at a time, and the
// authentication code is taken of what is written, so that a checkpoint costs pyrun
// its buffers rather than copies of the state (issue 36: a 150 MiB session
// took pyrun from 372 to 1016 MiB).
//
// Each chunk is a zstd frame of its own (a record's payload is their
// sequence, which decodes as one zstd stream): the heap's chunks are those
// of supervisor.CheckpointChunk from the heap's offset, so that an
// increment (a checkpoint whose worker left out the chunks unchanged since
// the one before) copies the previous record's frames for those instead of
// compressing the same bytes again (issue 37: a 50 MB session's checkpoint
// after a small call took 240-430 ms, most of it the whole heap's XOR and
// compression, and its trip through the pipe).

// chunkSize is how much of the state is read, XORed and compressed at a
// time: one frame.
const chunkSize = supervisor.CheckpointChunk

// encoderWindow bounds the compressor's memory: a heap XORed with its base
// is mostly zeros, which any window compresses, and random bytes no window
// does.
const encoderWindow = 2 << 20

// encoders keeps the compressors between checkpoints: each holds some MiB
// of buffers.
// They write no checksum in each frame: the record's authentication covers
// its bytes (auth.go), and a frame's checksum made a 91 MiB heap's 1456
// frames of 64 KiB decode in 116 ms instead of 71.
var encoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(encoderWindow), zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(err) // only for options out of range
	}
	return e
}}

// maxFrame is the most bytes a frame of chunkSize takes: zstd adds 3 bytes
// to each 128 KiB block it cannot compress, and its frame header.
const maxFrame = chunkSize + chunkSize/1024 + 1024

// buffers is a chunk, a frame's room, and the room frames copied from the
// record before go through.
type buffers struct {
	chunk [chunkSize]byte
	frame [maxFrame]byte
	copy  [1 << 20]byte
}

var chunks = sync.Pool{New: func() any { return new(buffers) }}

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
	n, _, err := encodeFrames(w, meta, mem, fs, src, base, baseSHA, key, nil)
	return n, err
}

// frame is where a frame of the heap is in a record: off and n, its
// bytes; raw, the heap's bytes it holds.
type frame struct{ off, n, raw int64 }

// increment is what a checkpoint that leaves chunks out copies them from:
// the record before's heap frames, in the file at. kept lists the heap
// chunks left out (supervisor.Image.Kept) and leftOut their bytes.
type increment struct {
	heap    []frame
	at      io.ReaderAt
	kept    [][2]int64
	leftOut int64
}

// keptChunks says which chunks of a heap of heapLen bytes inc keeps,
// checked against the record before: a worker is not trusted to name chunks that
// are there, of the same size, nor to count their bytes.
func (inc *increment) keptChunks(heapLen int64) ([]bool, error) {
	n := (heapLen + chunkSize - 1) / chunkSize
	kept := make([]bool, n)
	var bytes int64
	for _, r := range inc.kept {
		first, count := r[0], r[1]
		if first < 0 || count <= 0 || first > n-count {
			return nil, fmt.Errorf("the worker left out chunks %d-%d of %d", first, first+count-1, n)
		}
		for i := first; i < first+count; i++ {
			raw := min(chunkSize, heapLen-i*chunkSize)
			if kept[i] || i >= int64(len(inc.heap)) || inc.heap[i].raw != raw {
				return nil, fmt.Errorf("the worker left out chunk %d, which the checkpoint before has not as it is now", i)
			}
			kept[i], bytes = true, bytes+raw
		}
	}
	if bytes != inc.leftOut {
		return nil, fmt.Errorf("the worker left out %d bytes, but says %d", bytes, inc.leftOut)
	}
	return kept, nil
}

// copyFrames writes to out the frames of the heap's chunks i to j-1 of the
// record before, through buf, and returns where they start in out.
func copyFrames(out *summed, inc *increment, i, j int, buf []byte) (int64, error) {
	start, end := inc.heap[i].off, inc.heap[j-1].off+inc.heap[j-1].n
	for k := i; k+1 < j; k++ {
		if inc.heap[k+1].off != inc.heap[k].off+inc.heap[k].n {
			return 0, fmt.Errorf("the checkpoint before's frames %d and %d are not one after the other", k, k+1)
		}
	}
	at := out.n
	for p := start; p < end; {
		b := buf[:min(int64(len(buf)), end-p)]
		if _, err := inc.at.ReadAt(b, p); err != nil {
			return 0, fmt.Errorf("read the checkpoint before: %w", err)
		}
		if _, err := out.Write(b); err != nil {
			return 0, fmt.Errorf("write checkpoint: %w", err)
		}
		p += int64(len(b))
	}
	return at, nil
}

// encodeFrames is EncodeTo, a frame a chunk, the heap's frames at the
// heap's chunks; with inc, src leaves out the heap chunks inc keeps, whose
// frames it copies from the record before. It returns the record's size
// and where the heap's frames are in it.
func encodeFrames(w io.Writer, meta Meta, mem, fs int64, src io.Reader, base []byte, baseSHA string, key []byte, inc *increment) (int64, []frame, error) {
	if mem < 8 || fs < 0 {
		return 0, nil, fmt.Errorf("a checkpoint of %d + %d bytes", mem, fs)
	}
	buf := chunks.Get().(*buffers)
	defer chunks.Put(buf)
	if _, err := io.ReadFull(src, buf.chunk[:8]); err != nil {
		return 0, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	off := int64(binary.LittleEndian.Uint32(buf.chunk[4:8]))
	if off < 8 || off > mem {
		return 0, nil, fmt.Errorf("memory snapshot's heap offset %d past its end %d", off, mem)
	}
	var kept []bool
	if inc != nil {
		var err error
		if kept, err = inc.keptChunks(mem - off); err != nil {
			return 0, nil, err
		}
	}
	var baseHeap []byte
	meta.Mem, meta.FS, meta.HeapOff, meta.Base = mem, fs, off, ""
	if base != nil {
		boff, err := heapOffset(base)
		if err != nil {
			return 0, nil, fmt.Errorf("base: %w", err)
		}
		baseHeap, meta.Base = base[boff:], baseSHA
	}
	out := &summed{w: w, sum: newMAC(key)}
	if err := writeHead(out, meta); err != nil {
		return 0, nil, err
	}
	enc := encoders.Get().(*zstd.Encoder)
	defer encoders.Put(enc)
	heap := make([]frame, 0, (mem-off+chunkSize-1)/chunkSize)
	have := int64(8) // of the first chunk, read above
	// The pieces of the state, in order: the snapshot's header, the
	// heap's chunks, the files, each at most a chunk.
	piece := func(pos, n int64, chunk int) error {
		c := buf.chunk[:n]
		if _, err := io.ReadFull(src, c[have:]); err != nil {
			return fmt.Errorf("read checkpoint: %w", err)
		}
		have = 0
		// The heap's bytes in this chunk, those the base has too.
		if from, to := max(pos, off), min(pos+n, mem, off+int64(len(baseHeap))); from < to {
			x := c[from-pos : to-pos]
			subtle.XORBytes(x, x, baseHeap[from-off:to-off])
		}
		z := enc.EncodeAll(c, buf.frame[:0])
		if chunk >= 0 {
			heap = append(heap, frame{off: out.n, n: int64(len(z)), raw: n})
		}
		if _, err := out.Write(z); err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
		return nil
	}
	for pos := int64(0); pos < off; pos += chunkSize {
		if err := piece(pos, min(chunkSize, off-pos), -1); err != nil {
			return 0, nil, err
		}
	}
	for i, pos := 0, off; pos < mem; {
		if kept != nil && kept[i] {
			// A run of chunks left out: their frames, one after the
			// other in the record before, are copied as they are.
			j := i + 1
			for j < len(kept) && kept[j] {
				j++
			}
			from, err := copyFrames(out, inc, i, j, buf.copy[:])
			if err != nil {
				return 0, nil, err
			}
			for _, f := range inc.heap[i:j] {
				heap = append(heap, frame{off: from + f.off - inc.heap[i].off, n: f.n, raw: f.raw})
				pos += f.raw
			}
			i = j
			continue
		}
		if err := piece(pos, min(chunkSize, mem-pos), i); err != nil {
			return 0, nil, err
		}
		i, pos = i+1, pos+chunkSize
	}
	for pos := mem; pos < mem+fs; pos += chunkSize {
		if err := piece(pos, min(chunkSize, mem+fs-pos), -1); err != nil {
			return 0, nil, err
		}
	}
	if _, err := w.Write(out.sum.Sum(nil)); err != nil {
		return 0, nil, err
	}
	return out.n + int64(out.sum.Size()), heap, nil
}

// ReheaderTo writes to w rec, a record EncodeTo made, with meta's header
// instead (its sizes and base kept): the same state kept as another
// session's record, without compressing it again (a shared session
// worker's checkpoint, docs/sessions.md).
func ReheaderTo(w io.Writer, rec Record, meta Meta, key []byte) error {
	old, start, err := ReadRecordMeta(rec, key)
	if err != nil {
		return err
	}
	meta.Mem, meta.FS, meta.HeapOff, meta.Base = old.Mem, old.FS, old.HeapOff, old.Base
	out := &summed{w: w, sum: newMAC(key)}
	if err := writeHead(out, meta); err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(rec, start, rec.Size()-sha256.Size-start)); err != nil {
		return err
	}
	_, err = w.Write(out.sum.Sum(nil))
	return err
}

package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// The frames of a record read back: a record's payload is one zstd frame a
// chunk (encodeFrames), so that an increment copies the frames of the
// chunks the worker left out. The Keeper knows where they are in a record
// it wrote; of a record it restored, it finds them here, from the frames'
// own headers, so that the restored worker's first checkpoint may be an
// increment to it too.

// zstdMagic opens every zstd frame (RFC 8878, 3.1.1).
const zstdMagic = 0xFD2FB528

// heapFrames are where the heap's chunks' frames are in rec, a record of
// m's sizes whose payload starts at start.
func heapFrames(rec io.ReaderAt, size int64, m Meta, start int64) ([]frame, error) {
	head := (m.HeapOff + chunkSize - 1) / chunkSize
	chunks := (m.Mem - m.HeapOff + chunkSize - 1) / chunkSize
	heap := make([]frame, 0, chunks)
	end := size - sha256.Size
	off := start
	for i := int64(0); i < head+chunks; i++ {
		n, err := zstdFrameLen(rec, off, end)
		if err != nil {
			return nil, fmt.Errorf("frame %d of the record: %w", i, err)
		}
		if i >= head {
			pos := m.HeapOff + (i-head)*chunkSize
			heap = append(heap, frame{off: off, n: n, raw: min(chunkSize, m.Mem-pos)})
		}
		off += n
	}
	return heap, nil
}

// zstdFrameLen is the length of the zstd frame at off in r, which ends by
// end: its header, its blocks and its checksum (RFC 8878, 3.1.1).
func zstdFrameLen(r io.ReaderAt, off, end int64) (int64, error) {
	var h [6]byte
	if off+int64(len(h)) > end {
		return 0, fmt.Errorf("%w: a frame past the payload's end", ErrCorrupt)
	}
	if _, err := r.ReadAt(h[:], off); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(h[:4]) != zstdMagic {
		return 0, fmt.Errorf("%w: not a zstd frame at %d", ErrCorrupt, off)
	}
	desc := h[4]
	single := desc>>5&1 == 1
	fcs := [4]int64{0, 2, 4, 8}[desc>>6]
	if fcs == 0 && single {
		fcs = 1
	}
	window := int64(1)
	if single {
		window = 0
	}
	pos := off + 5 + window + [4]int64{0, 1, 2, 4}[desc&3] + fcs
	var b [3]byte
	for {
		if pos+3 > end {
			return 0, fmt.Errorf("%w: a block past the payload's end", ErrCorrupt)
		}
		if _, err := r.ReadAt(b[:], pos); err != nil {
			return 0, err
		}
		bh := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16
		last, kind, n := bh&1 == 1, bh>>1&3, bh>>3
		switch kind {
		case 0, 2: // raw, compressed
			pos += 3 + n
		case 1: // RLE: one byte
			pos += 3 + 1
		default:
			return 0, fmt.Errorf("%w: a reserved block type", ErrCorrupt)
		}
		if last {
			break
		}
	}
	if desc>>2&1 == 1 {
		pos += 4 // the content checksum
	}
	if pos > end {
		return 0, fmt.Errorf("%w: a frame past the payload's end", ErrCorrupt)
	}
	return pos - off, nil
}

package supervisor

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"strconv"
)

// The sums of a restore's heap chunks, as a worker makes them of its own
// heap at a checkpoint (pyodide-host/chunks.ts, whose function this is):
// pyrun sums the heap of the checkpoint it restores as it writes the
// restore's file, and hands the sums to the restored worker with the
// restore, so that the worker's first checkpoint leaves out the chunks
// that are still as restored, and pyrun copies their frames from the
// record it restored (docs/protocol.md, Checkpoints). Before, that
// checkpoint sent the whole heap: a move, a restart or a lost worker made
// the next checkpoint as dear as the session's first (issue 37).

// The four lanes' multipliers and rotations: chunks.ts's K and ROT.
const (
	chunkK0, chunkK1, chunkK2, chunkK3 = 0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9, 0xd6e8feb86659fd93
	chunkR0, chunkR1, chunkR2, chunkR3 = 31, 27, 33, 29
)

// restoredSums are the sums a restored worker takes as those of its last
// checkpoint (restoreSpec.Sums): named Token, of a heap of Heap bytes, with
// the seed they were made from. The seeds and the sums are the worker's
// signed 64-bit integers, the seeds in decimal (JSON numbers are doubles),
// the sums four a chunk in little-endian bytes, base64.
type restoredSums struct {
	Token string    `json:"token"`
	Seed  [4]string `json:"seed"`
	Sums  string    `json:"sums"`
	Heap  int64     `json:"heap"`
}

// chunkSummer is an io.Writer that sums the heap of a checkpoint's bytes
// written to it in order: Pyodide's memory snapshot (its heap from the
// offset in the header's bytes 4-8, to mem), then the files, which it
// skips.
type chunkSummer struct {
	mem     int64 // where the memory snapshot ends
	seed    [4]uint64
	pos     int64     // bytes written so far
	head    [8]byte   // the snapshot's first bytes, for the heap's offset
	heapOff int64     // 0 until known
	lanes   [4]uint64 // of the chunk being summed
	carry   [16]byte  // a word pair split between two writes
	nc      int
	sums    []uint64 // four a chunk summed
	bad     bool     // the heap is not what a worker sums (its size)
}

func newChunkSummer(mem int64) *chunkSummer {
	s := &chunkSummer{mem: mem}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail (Go 1.24)
	for i := range s.seed {
		s.seed[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	s.lanes = s.seed
	return s
}

func (s *chunkSummer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !s.bad {
		if s.pos < 8 {
			k := copy(s.head[s.pos:], p)
			s.pos, p = s.pos+int64(k), p[k:]
			if s.pos == 8 {
				s.heapOff = int64(binary.LittleEndian.Uint32(s.head[4:8]))
				// A worker sums a heap of whole words only (chunks.ts).
				s.bad = s.heapOff < 8 || s.heapOff > s.mem || (s.mem-s.heapOff)%16 != 0
			}
			continue
		}
		if s.pos < s.heapOff || s.pos >= s.mem {
			// The snapshot's header, or the files.
			next := s.heapOff
			if s.pos >= s.heapOff {
				next = s.pos + int64(len(p))
			}
			k := min(int64(len(p)), next-s.pos)
			s.pos, p = s.pos+k, p[k:]
			continue
		}
		rel := s.pos - s.heapOff
		end := min(s.heapOff+(rel/CheckpointChunk+1)*CheckpointChunk, s.mem)
		k := min(int64(len(p)), end-s.pos)
		s.feed(p[:k])
		s.pos, p = s.pos+k, p[k:]
		if s.pos == end {
			s.sums = append(s.sums, s.lanes[:]...)
			s.lanes = s.seed
		}
	}
	return n, nil
}

// feed sums b, bytes of one chunk, 16 at a time, keeping what is left of
// the last 16 for the next write.
func (s *chunkSummer) feed(b []byte) {
	if s.nc > 0 {
		k := copy(s.carry[s.nc:], b)
		s.nc, b = s.nc+k, b[k:]
		if s.nc < 16 {
			return
		}
		s.words(s.carry[:])
		s.nc = 0
	}
	whole := len(b) &^ 15
	s.words(b[:whole])
	s.nc = copy(s.carry[:], b[whole:])
}

// words sums b, a multiple of 16 bytes: each 8 go into two lanes, acc =
// rotl((acc ^ x) * K, r).
func (s *chunkSummer) words(b []byte) {
	a, c, d, e := s.lanes[0], s.lanes[1], s.lanes[2], s.lanes[3]
	for ; len(b) >= 16; b = b[16:] {
		w := (*[16]byte)(b) // one bounds check a word pair
		x := binary.LittleEndian.Uint64(w[:8])
		y := binary.LittleEndian.Uint64(w[8:])
		a = bits.RotateLeft64((a^x)*chunkK0, chunkR0)
		c = bits.RotateLeft64((c^x)*chunkK1, chunkR1)
		d = bits.RotateLeft64((d^y)*chunkK2, chunkR2)
		e = bits.RotateLeft64((e^y)*chunkK3, chunkR3)
	}
	s.lanes = [4]uint64{a, c, d, e}
}

// result is the sums, for a restored worker, once every byte was written;
// nil when the heap is not one a worker sums.
func (s *chunkSummer) result() *restoredSums {
	heap := s.mem - s.heapOff
	if s.bad || s.pos < s.mem || int64(len(s.sums)) != 4*((heap+CheckpointChunk-1)/CheckpointChunk) {
		return nil
	}
	raw := make([]byte, 8*len(s.sums))
	for i, v := range s.sums {
		binary.LittleEndian.PutUint64(raw[8*i:], v)
	}
	var t [16]byte
	_, _ = rand.Read(t[:])
	r := &restoredSums{Token: "restored-" + hex.EncodeToString(t[:]), Sums: base64.StdEncoding.EncodeToString(raw), Heap: heap}
	for i, v := range s.seed {
		r.Seed[i] = strconv.FormatInt(int64(v), 10)
	}
	return r
}

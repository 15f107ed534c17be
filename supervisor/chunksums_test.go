package supervisor

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"testing"
)

// chunkSumsOf is the sums of heap, chunk by chunk, written the plain way:
// what the worker's wasm function does (pyodide-host/chunks.ts).
func chunkSumsOf(heap []byte, seed [4]uint64) []uint64 {
	keys := [4]uint64{chunkK0, chunkK1, chunkK2, chunkK3}
	rotations := [4]int{chunkR0, chunkR1, chunkR2, chunkR3}
	var out []uint64
	for c := 0; c < len(heap); c += CheckpointChunk {
		l, w := seed, heap[c:min(c+CheckpointChunk, len(heap))]
		for i := 0; i < len(w); i += 16 {
			x, y := binary.LittleEndian.Uint64(w[i:]), binary.LittleEndian.Uint64(w[i+8:])
			for j, v := range []uint64{x, x, y, y} {
				l[j] = bits.RotateLeft64((l[j]^v)*keys[j], rotations[j])
			}
		}
		out = append(out, l[:]...)
	}
	return out
}

// snapshotOf is a memory snapshot of heap after a header of hdr bytes.
func snapshotOf(hdr int, heap []byte) []byte {
	b := make([]byte, hdr)
	rand.Read(b)
	binary.LittleEndian.PutUint32(b[4:8], uint32(hdr))
	return append(b, heap...)
}

func decodeSums(t *testing.T, r *restoredSums) ([4]uint64, []uint64) {
	t.Helper()
	var seed [4]uint64
	for i, s := range r.Seed {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed[i] = uint64(v)
	}
	raw, err := base64.StdEncoding.DecodeString(r.Sums)
	if err != nil {
		t.Fatal(err)
	}
	sums := make([]uint64, len(raw)/8)
	for i := range sums {
		sums[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return seed, sums
}

// The sums of a restore's heap, written in pieces of any size, are the
// heap's chunks' sums from the seed they give, the header and the files
// left out; a word changed changes its chunk's sums only; a heap a worker
// does not sum (not of whole 16-byte words) has none.
func TestRestoreSumsAreTheWorkersChunkSums(t *testing.T) {
	heap := make([]byte, 5*CheckpointChunk+4096)
	rand.Read(heap[:2*CheckpointChunk]) // and zeros after
	img := append(snapshotOf(1024, heap), []byte("PYRUNFS1 the files")...)
	mem := int64(1024 + len(heap))
	var first []uint64
	for _, piece := range []int{len(img), 1 << 20, 4097, 7, 1} {
		s := newChunkSummer(mem)
		for b := img; len(b) > 0; b = b[min(piece, len(b)):] {
			s.Write(b[:min(piece, len(b))])
		}
		r := s.result()
		if r == nil {
			t.Fatalf("pieces of %d: no sums", piece)
		}
		seed, sums := decodeSums(t, r)
		if want := chunkSumsOf(heap, seed); !slices.Equal(sums, want) {
			t.Fatalf("pieces of %d: %d sums, not the heap's %d", piece, len(sums), len(want))
		}
		if r.Heap != int64(len(heap)) || r.Token == "" {
			t.Errorf("pieces of %d: heap %d, token %q; want %d and a token", piece, r.Heap, r.Token, len(heap))
		}
		if piece == len(img) {
			first = chunkSumsOf(heap, seed)
			changed := bytes.Clone(heap)
			changed[3*CheckpointChunk+100] ^= 1
			again := chunkSumsOf(changed, seed)
			for c := 0; c < 6; c++ {
				same := slices.Equal(first[4*c:4*c+4], again[4*c:4*c+4])
				if same == (c == 3) {
					t.Errorf("a word of chunk 3 changed: chunk %d's sums the same: %v", c, same)
				}
			}
		}
	}
	for _, bad := range [][]byte{snapshotOf(1024, heap[:100]), snapshotOf(1024, heap)[:500]} {
		s := newChunkSummer(int64(len(bad)))
		if len(bad) == 500 {
			s = newChunkSummer(mem) // the bytes end before the heap does
		}
		s.Write(bad)
		if r := s.result(); r != nil {
			t.Errorf("a heap of %d bytes: sums, want none", len(bad))
		}
	}
}

// BenchmarkChunkSummer: what summing a restore's heap costs, per byte: a
// 91 MiB heap, the 50 MB session's, written a MiB at a time as copySparse
// does.
func BenchmarkChunkSummer(b *testing.B) {
	heap := make([]byte, 91<<20)
	rand.Read(heap)
	img := snapshotOf(1024, heap)
	b.SetBytes(int64(len(img)))
	for b.Loop() {
		s := newChunkSummer(int64(len(img)))
		for p := img; len(p) > 0; p = p[min(1<<20, len(p)):] {
			s.Write(p[:min(1<<20, len(p))])
		}
		if s.result() == nil {
			b.Fatal("no sums")
		}
	}
}

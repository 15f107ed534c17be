package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// zeroFrame is a zstd frame of n zero bytes (n a multiple of 128 KiB) made
// of RLE blocks, 4 bytes each: 4 GiB of zeros in 128 KiB.
func zeroFrame(n int64) []byte {
	const block = 128 << 10
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3} // magic; no size; a 128 KiB window
	for left := n; left > 0; left -= block {
		h := uint32(1<<1 | block<<3) // an RLE block of 128 KiB
		if left <= block {
			h |= 1 // the last
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16), 0)
	}
	return out
}

// rawRecord is a record of meta's header, as it is, and payload (zstd),
// authenticated with testKey: what a store's own key makes of anything.
func rawRecord(t *testing.T, meta Meta, payload []byte) []byte {
	t.Helper()
	hdr, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, magic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hdr)))
	out = append(append(out, hdr...), payload...)
	return append(out, sumOf(testKey, out)...)
}

// A record whose small payload expands far past the size it declares (128
// KiB of record, 4 GiB of zeros) is refused once the declared size is
// passed: quickly, and with no more memory than that size and the
// decoder's window.
func TestDecodeRefusesAPayloadThatExpandsPastItsSize(t *testing.T) {
	const declared = 1 << 20
	meta := Meta{Session: "box.1", Mem: declared}
	// Control: the same framing, of the size declared, decodes.
	if _, mem, _, err := Decode(rawRecord(t, meta, zeroFrame(declared)), 256<<20, nil, testKey); err != nil || len(mem) != declared {
		t.Fatalf("a payload of its declared size: %d bytes, %v", len(mem), err)
	}
	bomb := rawRecord(t, meta, zeroFrame(4<<30))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	began := time.Now()
	_, _, _, err := Decode(bomb, 256<<20, nil, testKey)
	took := time.Since(began)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "expands past the 1048576 bytes it declares") {
		t.Errorf("a %d-byte record of 4 GiB: %v, want it refused for expanding past its size", len(bomb), err)
	}
	if alloc, most := after.TotalAlloc-before.TotalAlloc, uint64(declared+maxWindow+4<<20); alloc > most {
		t.Errorf("decoding it allocated %d MiB, want at most %d MiB", alloc>>20, most>>20)
	}
	t.Logf("refused in %s, %d KiB allocated", took, (after.TotalAlloc-before.TotalAlloc)>>10)
	if took > 5*time.Second {
		t.Errorf("refusing it took %s", took)
	}
	// Shorter than it declares: refused too.
	if _, _, _, err := Decode(rawRecord(t, meta, zeroFrame(declared/2)), 256<<20, nil, testKey); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "not the 1048576 it declares") {
		t.Errorf("a payload shorter than declared: %v", err)
	}
	// Declaring past the bound: refused before anything is decoded.
	meta.Mem = 512 << 20
	if _, _, _, err := Decode(rawRecord(t, meta, zeroFrame(4<<30)), 256<<20, nil, testKey); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "past the bound") {
		t.Errorf("a record declaring 512 MiB with a bound of 256: %v", err)
	}
}

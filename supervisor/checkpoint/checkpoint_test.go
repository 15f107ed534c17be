package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// testKey authenticates the tests' records.
var testKey = bytes.Repeat([]byte("k"), MinKeyLen)

// fakeMem is a memory snapshot's shape: a header whose second u32 is where
// the heap starts, then the heap.
func fakeMem(heap []byte) []byte {
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[4:], 16)
	return append(hdr, heap...)
}

// offBase is a base snapshot whose heap is n times "base-heap ", and a
// snapshot of the same heap but for own, written at offset at.
func offBase(n, at int, own string) (base, mem []byte) {
	heap := bytes.Repeat([]byte("base-heap "), n)
	base = fakeMem(heap) // a copy: fakeMem appends heap to a header
	copy(heap[at:], own)
	return base, fakeMem(heap)
}

func TestFormatRoundTripAgainstABase(t *testing.T) {
	base, mem := offBase(100000, 5000, "the session's own bytes")
	want := bytes.Clone(mem)
	files := []byte("PYRUNFS1 files")
	rec, err := Encode(Meta{Session: "box.1", AfterCall: 3}, mem, files, base, "sha-of-base", testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) > len(want)/50 {
		t.Errorf("a heap that differs from its base in 23 bytes takes %d bytes of %d", len(rec), len(want))
	}
	m, gotMem, gotFiles, err := Decode(rec, 1<<30, func(sha string) []byte {
		if sha == "sha-of-base" {
			return base
		}
		return nil
	}, testKey)
	if err != nil || m.AfterCall != 3 || !bytes.Equal(gotMem, want) || !bytes.Equal(gotFiles, files) {
		t.Fatalf("decoded %+v, mem equal %v, files %q, %v", m, bytes.Equal(gotMem, want), gotFiles, err)
	}
	// Without its base the record gives a clear error, never a wrong heap.
	if _, _, _, err := Decode(rec, 1<<30, func(string) []byte { return nil }, testKey); err == nil || !strings.Contains(err.Error(), "base snapshot") {
		t.Errorf("decode without the base: %v", err)
	}
}

// One checkpoint of a shared session worker is kept as the record of each
// of its sessions: the same state under another header, each header its
// session's, checksummed again.
func TestReheaderKeepsTheStateForAnotherSession(t *testing.T) {
	base, mem := offBase(1000, 50, "two sessions' bytes")
	want := bytes.Clone(mem)
	files := []byte("PYRUNFS1 files")
	rec, err := Encode(Meta{Session: "box.a", AfterCall: 2, Namespace: "s1"}, mem, files, base, "sha", testKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Reheader(rec, Meta{Session: "box.b", AfterCall: 5, Namespace: "s2"}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	bases := func(sha string) []byte { return map[string][]byte{"sha": base}[sha] }
	for _, tc := range []struct {
		rec       []byte
		id, ns    string
		afterCall int
	}{{rec, "box.a", "s1", 2}, {other, "box.b", "s2", 5}} {
		m, gotMem, gotFiles, err := Decode(tc.rec, 1<<30, bases, testKey)
		if err != nil || m.Session != tc.id || m.Namespace != tc.ns || m.AfterCall != tc.afterCall ||
			!bytes.Equal(gotMem, want) || !bytes.Equal(gotFiles, files) {
			t.Errorf("record of %s: %+v, mem equal %v, files %q, %v", tc.id, m, bytes.Equal(gotMem, want), gotFiles, err)
		}
	}
	other[len(other)/2] ^= 1
	if _, err := Reheader(other, Meta{Session: "box.c"}, testKey); !errors.Is(err, ErrCorrupt) {
		t.Errorf("reheader of a damaged record: %v, want ErrCorrupt", err)
	}
}

func TestFormatRefusesDamage(t *testing.T) {
	rec, err := Encode(Meta{Session: "box.1"}, fakeMem([]byte("heap")), []byte("files"), nil, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x40
		if _, _, _, err := Decode(bad, 1<<30, nil, testKey); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a record with byte %d changed: %v, want ErrCorrupt", i, err)
		}
	}
	if _, _, _, err := Decode(rec[:len(rec)-1], 1<<30, nil, testKey); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a cut record: %v", err)
	}
	if _, _, _, err := Decode(rec, 8, nil, testKey); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a record past the bound: %v", err)
	}
}

// keepTwoCalls puts checkpoints of session box.1 after calls 1 and 2 in
// store, and wants a Keeper of it to load the later one; it returns that
// Keeper and the lease the checkpoints were put under.
func keepTwoCalls(t *testing.T, ctx context.Context, store Store) (*Keeper, Lease) {
	t.Helper()
	k := &Keeper{store: store, key: testKey, max: 1 << 30, log: hclog.NewNullLogger()}
	fence, err := store.Acquire(ctx, "box.1", "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for call := 1; call <= 2; call++ {
		rec, err := Encode(Meta{Session: "box.1", Seq: uint64(call), AfterCall: call}, fakeMem([]byte("heap")), nil, nil, "", testKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, "box.1", NewRecord(rec), uint64(call), fence); err != nil {
			t.Fatal(err)
		}
	}
	if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 2 {
		t.Fatalf("load: %+v %v", m, err)
	}
	return k, fence
}

// A damaged latest record leaves the one before it; a crash mid-write
// leaves only a temporary file, which is never read.
func TestDirKeepsAnOlderIntactCheckpoint(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k, fence := keepTwoCalls(t, ctx, store)
	latest := filepath.Join(dir, "box.1.ckpt")
	b, _ := os.ReadFile(latest)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(latest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 1 {
		t.Fatalf("load with a damaged latest: %+v %v, want the older call 1", m, err)
	}
	os.WriteFile(filepath.Join(dir, "box.1.prev.ckpt"), []byte("junk"), 0o600)
	if _, _, err := k.Load(ctx, "box.1"); err == nil || !strings.Contains(err.Error(), "no intact checkpoint") {
		t.Fatalf("load with both damaged: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := store.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "box.1" {
		t.Errorf("keys %v %v", keys, err)
	}
	if err := store.Delete(ctx, "box.1", fence); err != nil {
		t.Fatal(err)
	}
	if l, p, err := getBoth(ctx, store, "box.1"); l != nil || p != nil || err != nil {
		t.Errorf("after delete: %d %d %v", len(l), len(p), err)
	}
	if err := store.Put(ctx, "../escape", NewRecord([]byte("x")), 1, fence); err == nil {
		t.Error("a key with a path in it was taken")
	}
}

// A record is read from the store's file as it is decoded: one changed in
// place after its authentication was checked (which pyrun never does, and
// an attacker with the folder might) fails the read at its end, with an
// error that wraps ErrCorrupt, instead of giving bytes it did not check.
func TestRecordChangedWhileReadIsRefused(t *testing.T) {
	mem := fakeMem(bytes.Repeat([]byte("state "), 200000))
	rec, err := Encode(Meta{Session: "box.1", AfterCall: 1}, mem, []byte("files"), nil, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "box.1.ckpt")
	if err := os.WriteFile(path, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := openRegular(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	m, p, err := Open(r, 1<<30, nil, testKey)
	if err != nil || m.Session != "box.1" {
		t.Fatalf("open: %+v %v", m, err)
	}
	// The same file (its inode, which the record holds open), other bytes
	// in its payload.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 16), int64(len(rec)-64)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, err := io.ReadAll(p); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read %d bytes of a record changed in place: %v, want an error wrapping ErrCorrupt", len(got), err)
	}
	// Unchanged, the same read gives the state.
	if err := os.WriteFile(path, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = openRegular(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	_, p, err = Open(r, 1<<30, nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, append(bytes.Clone(mem), "files"...)) {
		t.Errorf("read %d bytes: %v", len(got), err)
	}
}

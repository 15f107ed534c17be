package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// reheaded is rec with meta's header and a trailer made without the key:
// the SHA-256 that used to be the records' checksum, or an HMAC under
// another key. What someone who can write to the store, but has not its
// key, can make of a record of alice's.
func reheaded(t *testing.T, rec []byte, meta Meta, key []byte) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(rec[len(magic):]))
	payload := rec[len(magic)+4+n : len(rec)-sha256.Size]
	hdr, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, magic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hdr)))
	out = append(append(out, hdr...), payload...)
	if key == nil {
		sum := sha256.Sum256(out)
		return append(out, sum[:]...)
	}
	return append(out, sumOf(key, out)...)
}

// A record is authenticated with the store's key, its header (session,
// owner, sequence number) included: a record of alice's session re-headed
// as bob's, or changed in any way, without the key, is refused; so is one
// under another key, and one of the unauthenticated format before.
func TestRecordsAreAuthenticated(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := &Keeper{store: store, key: testKey, max: 1 << 30, log: hclog.NewNullLogger()}
	alice := Meta{Session: "box.a", Owner: "alice", Seq: 1, AfterCall: 1}
	rec, err := Encode(alice, fakeMem([]byte("alice's secret")), nil, nil, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := ReadMeta(rec, testKey) // its sizes
	if err != nil {
		t.Fatal(err)
	}
	bob.Session, bob.Owner = "box.b", "bob"
	otherKey := bytes.Repeat([]byte("x"), MinKeyLen)
	oldFormat := bytes.Clone(reheaded(t, rec, alice, nil))
	copy(oldFormat, "PYRUNCK1")
	sum := sha256.Sum256(oldFormat[:len(oldFormat)-sha256.Size])
	copy(oldFormat[len(oldFormat)-sha256.Size:], sum[:])

	fence, err := store.Acquire(ctx, "box.b", "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  []byte
		want string
	}{
		{"alice's record re-headed as bob's, checksummed", reheaded(t, rec, bob, nil), "authentication does not match"},
		{"alice's record re-headed as bob's, under another key", reheaded(t, rec, bob, otherKey), "authentication does not match"},
		{"alice's record as it is, put in bob's place", rec, "it is session box.a's"},
		{"a record of the format before", oldFormat, "older pyrun"},
	} {
		os.Remove(filepath.Join(dir, "box.b.seq")) // each put anew
		if err := store.Put(ctx, "box.b", NewRecord(tc.rec), 1, fence); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "box.b.prev.ckpt"))
		if m, _, err := k.Load(ctx, "box.b"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loaded %+v, %v; want ErrCorrupt saying %q", tc.name, m, err, tc.want)
		}
		if saved, err := k.List(ctx); err != nil || len(saved) != 0 {
			t.Errorf("%s: listed %+v %v", tc.name, saved, err)
		}
	}
	// Control: the record re-headed with the key (as pyrun does for the
	// sessions of a shared worker) is bob's.
	bob.Seq = 2
	if err := store.Put(ctx, "box.b", NewRecord(reheaded(t, rec, bob, testKey)), 2, fence); err != nil {
		t.Fatal(err)
	}
	m, img, err := k.Load(ctx, "box.b")
	if err != nil || m.Owner != "bob" {
		t.Fatalf("re-headed with the key: %+v %v", m, err)
	}
	if state, err := io.ReadAll(img.R); err != nil || !bytes.Contains(state, []byte("alice's secret")) {
		t.Errorf("re-headed with the key: the state lost alice's secret (%v)", err)
	}
}

// putSeq puts a record of session box.1 after call n, with sequence n.
func putSeq(t *testing.T, store Store, n int, fence Lease) []byte {
	t.Helper()
	rec, err := Encode(Meta{Session: "box.1", Seq: uint64(n), AfterCall: n}, fakeMem([]byte("heap")), nil, nil, "", testKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), "box.1", NewRecord(rec), uint64(n), fence); err != nil {
		t.Fatal(err)
	}
	return rec
}

// An older record of a session put back in place of a newer one is
// refused: the store keeps the sequence numbers of the latest record and
// the one before, and a record older than its place's is not restored
// (the one before, when intact and in its place, is; when both are old,
// none is). A write of a number not past the store's is refused. A latest
// record newer than the store's number (a crash between the write of the
// record and of its number) is kept. Both stores.
func TestReplayedRecordsAreRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ds, err := OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := OpenRedis(ctx, startRedis(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for _, tc := range []struct {
		name  string
		store Store
		// put replaces the latest (or previous) record as someone who
		// can write to the store but has not its key would.
		put func(rec []byte, previous bool)
		// lag sets the store's numbers to an older write's.
		lag func()
	}{
		{"dir", ds, func(rec []byte, previous bool) {
			name := map[bool]string{false: "box.1.ckpt", true: "box.1.prev.ckpt"}[previous]
			if err := os.WriteFile(filepath.Join(dir, name), rec, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func() {
			if err := ds.writeSeqs("box.1", seqRecord{Latest: 3, Previous: 2}); err != nil {
				t.Fatal(err)
			}
		}},
		{"redis", rs, func(rec []byte, previous bool) {
			if err := rs.c.Set(ctx, map[bool]string{false: redisLatest, true: redisPrev}[previous]+"box.1", rec, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, func() {
			if err := rs.c.HSet(ctx, redisSeq+"box.1", "latest", 3, "previous", 2).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Keeper{store: tc.store, key: testKey, max: 1 << 30, log: hclog.NewNullLogger()}
			fence, err := tc.store.Acquire(ctx, "box.1", "test", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			first := putSeq(t, tc.store, 1, fence)
			putSeq(t, tc.store, 2, fence)
			putSeq(t, tc.store, 3, fence)
			if seq, err := k.nextSeqs(ctx, []sessions.Saved{{ID: "box.1"}}); err != nil || seq["box.1"] != 4 {
				t.Errorf("the next sequence number: %v %v, want 4", seq, err)
			}
			tc.put(first, false)
			if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 2 {
				t.Errorf("record 1 put back as the latest: loaded %+v %v, want the previous, 2", m, err)
			}
			tc.put(first, true)
			if m, _, err := k.Load(ctx, "box.1"); !errors.Is(err, ErrReplay) || !errors.Is(err, ErrCorrupt) {
				t.Errorf("record 1 put back as both: loaded %+v %v, want ErrReplay", m, err)
			}
			rec, _ := Encode(Meta{Session: "box.1", Seq: 3, AfterCall: 9}, fakeMem([]byte("heap")), nil, nil, "", testKey)
			if err := tc.store.Put(ctx, "box.1", NewRecord(rec), 3, fence); !errors.Is(err, ErrReplay) {
				t.Errorf("a write of number 3 after 3: %v, want ErrReplay", err)
			}
			putSeq(t, tc.store, 4, fence)
			tc.lag()
			if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 4 {
				t.Errorf("a latest newer than the store's number: loaded %+v %v, want 4", m, err)
			}
			if err := tc.store.Delete(ctx, "box.1", fence); err != nil {
				t.Fatal(err)
			}
			if l, p, err := tc.store.Seqs(ctx, "box.1"); l != 0 || p != 0 || err != nil {
				t.Errorf("numbers after delete: %d %d %v", l, p, err)
			}
		})
	}
}

// A dir: store with no key given makes its own on first use, private to
// pyrun's user, and every instance that shares the folder (however many
// start at once) reads the same. A key file is read through a link (a
// Kubernetes Secret's), never from a named pipe, and must be long enough.
func TestStoreKeys(t *testing.T) {
	dir := t.TempDir()
	keys := make(chan []byte, 4)
	for range cap(keys) {
		go func() {
			k, err := DirKey(dir)
			if err != nil {
				t.Error(err)
			}
			keys <- k
		}()
	}
	first := <-keys
	for range cap(keys) - 1 {
		if k := <-keys; !bytes.Equal(k, first) {
			t.Errorf("instances starting at once have keys %q and %q", first, k)
		}
	}
	st, err := os.Stat(filepath.Join(dir, ".key"))
	if err != nil || st.Mode().Perm() != 0o600 || len(first) != 64 {
		t.Fatalf("the store's own key: %v %v, %d bytes", st.Mode(), err, len(first))
	}
	if again, err := DirKey(dir); err != nil || !bytes.Equal(again, first) {
		t.Errorf("the key read again: %q %v", again, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want the key alone", len(ents))
	}

	link := filepath.Join(t.TempDir(), "key")
	if err := os.Symlink(filepath.Join(dir, ".key"), link); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadKeyFile(link); err != nil || !bytes.Equal(k, first) {
		t.Errorf("a key file through a link: %q %v", k, err)
	}
	other := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, ".key"), filepath.Join(other, ".key")); err != nil {
		t.Fatal(err)
	}
	if _, err := DirKey(other); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a store whose .key is a link: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("0123456789abcdef\n"), 0o600)
	if _, err := ReadKeyFile(short); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a 16-byte key: %v", err)
	}
	if _, err := NewKeeper(nil, []byte("short"), nil, t.TempDir(), 0, nil); err == nil {
		t.Error("a Keeper with a short key was made")
	}
}

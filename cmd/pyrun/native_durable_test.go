package main

// End-to-end tests of native sessions' checkpoints beyond native_test.go's
// (docs/sessions.md, Native code): a move between instances, a rollback
// past a later call, a damaged record of the native code, and sessions of
// one shared worker, whose C state is the worker's.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrun/pyrun/internal/nativefix"
	"github.com/pyrun/pyrun/internal/redisrun"
)

// nativePeek reads the C state nativeSetup leaves: the counter's next
// value, the saved string, the extension's next bump, what it keeps.
const nativePeek = "[lib.counter_next(), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()]"

// A native session moves between two live instances on one Redis store:
// called on B, it continues with the C state of A's last call (A hands it
// over, no checkpoint being due), and a later call on A sees B's.
func TestNativeSessionMovesBetweenInstances(t *testing.T) {
	fx := nativefix.Build(t)
	url, _ := redisrun.Start(t)
	keyFile := storeKeyFile(t)
	args := func(name string) []string {
		// Only a hand-over writes a checkpoint: a stale state would show.
		return []string{"--workers", "1", "--network", "none", "--session-store", url, "--session-store-key-file", keyFile,
			"--instance-id", name, "--checkpoint-delay", "1h", "--session-lease", "2s", "--session-spares", "0"}
	}
	a := newServer(t, args("box-a")...)
	b := newServer(t, args("box-b")...)
	id := a.inSession(t, "new", nativeSetup, "files", nativeFiles(t, fx)).sc.SessionID
	wantValue(t, a.inSession(t, id, nativeNext), `[3, "kept in C", 4, [1, 2, 3]]`)
	r := b.inSession(t, id, "r = [lib.counter_next(), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.kept()['rows']]\n"+
		"lib.counter_save(b'from B'); pyrunnative.faster(); pyrunnative.keep('from B')\nr")
	wantValue(t, r, `[4, "kept in C", 6, [1, 2, 3]]`)
	wantValue(t, a.inSession(t, id, nativePeek), `[5, "from B", 8, "from B"]`)
	if a.log.count("session moved here") != 1 || b.log.count("session moved here") != 1 {
		t.Errorf("moves: %d to A, %d to B; want 1 each", a.log.count("session moved here"), b.log.count("session moved here"))
	}
}

// A native session whose call after its checkpoint loses the worker goes
// back to the checkpoint's C state, not the later call's, and says so. A
// record whose native part is damaged (forged with the store's key, so
// that it passes its authentication) is refused with an error saying so:
// the session is lost, never restored without its side modules, and pyrun,
// its pool and its other sessions go on.
func TestNativeRollbackAndDamagedRecords(t *testing.T) {
	fx := nativefix.Build(t)
	store, keyFile := t.TempDir(), storeKeyFile(t)
	s := newServer(t, "--workers", "1", "--network", "none", "--session-worker", "own",
		"--session-spares", "0", "--session-store", "dir:"+store, "--session-store-key-file", keyFile, "--checkpoint-delay", "100ms")
	var ids [3]string // rolled back; its record.json damaged; a side module damaged
	for i := range ids {
		r := s.inSession(t, "new", nativeSetup, "files", nativeFiles(t, fx))
		wantValue(t, r, "[1, 2, 42, 42, 9, 1, 2]") // each its own worker's C state
		ids[i] = r.sc.SessionID
	}
	waitFor(t, "the sessions' checkpoints", 60*time.Second, func() bool {
		return s.log.count("session checkpoint") >= len(ids)
	})
	forgeRecord(t, store, ids[1], keyFile, "/tmp/.pyrun-dynlibs/record.json", func(b []byte) { b[0] = '!' })
	forgeRecord(t, store, ids[2], keyFile, "/tmp/.pyrun-dynlibs/0.so", func(b []byte) { copy(b, "\x00bad") }) // its wasm magic

	r := s.inSession(t, ids[0], "lib.counter_next(); lib.counter_save(b'later'); pyrunnative.faster(); pyrunnative.keep('later')\n"+
		"import js\njs.Deno.exit(3)")
	if r.sc.Status == "success" || r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 ||
		!strings.Contains(r.text, "continues from its checkpoint after call 1") {
		t.Fatalf("the call whose worker died: status %s, checkpoint %+v, want a failure going back to call 1\n%s", r.sc.Status, r.sc.Checkpoint, r.text)
	}
	for i, want := range []string{"its record is damaged", "side module libcounter.so: need to see wasm magic number"} {
		r := s.inSession(t, ids[i+1], "import js\njs.Deno.exit(3)")
		if r.sc.Checkpoint != nil || r.sc.Error == nil || !strings.Contains(*r.sc.Error, "its checkpoint could not be restored") ||
			!strings.Contains(*r.sc.Error, "the checkpoint's native code could not be loaded again: "+want) {
			t.Errorf("the lost call of the session with a damaged record: %+v, want its checkpoint refused (%s)\n%s", r.sc.Checkpoint, want, r.text)
		}
		s.sessionToolError(t, map[string]any{"python_code": "lib", "session_id": ids[i+1]}, "was lost", "could not be restored")
	}
	wantValue(t, s.run(t, "6 * 7"), "42")
	// The checkpoint's C state: the counters and string of the setup, the
	// extension's step and kept object (none) as they were.
	r = s.inSession(t, ids[0], "[lib.counter_next(), lib.counter_apply(1, 6, 7), lib.counter_saved().decode(), pyrunnative.bump(), pyrunnative.bump(), pyrunnative.kept()]")
	wantValue(t, r, `[3, 42, "kept in C", 3, 4, 0]`)
	if r.sc.Checkpoint != nil {
		t.Errorf("the call after the rollback names checkpoint %+v", r.sc.Checkpoint)
	}
}

// Sessions of one shared session worker share its native code: a library
// a session loads again (its own copy, at the same path) is the one
// loaded, with its C state. A checkpoint is the worker's, so each session,
// restored from its own record when the worker dies, has the C state of
// the worker when that record was taken: the one whose call lost the
// worker goes back to its checkpoint's, the other continues with its last
// call's (docs/sessions.md, Native code).
func TestNativeSessionsOnASharedWorkerRestoreEachItsOwnCState(t *testing.T) {
	fx := nativefix.Build(t)
	store := t.TempDir()
	s := newServer(t, "--workers", "1", "--network", "none", "--session-spares", "0", "--session-store", "dir:"+store, "--checkpoint-delay", "100ms")
	a := s.inSession(t, "new", nativeSetup, "files", nativeFiles(t, fx)).sc.SessionID
	r := s.inSession(t, "new", nativeSetup+"\nlib.counter_save(b'B'); pyrunnative.keep('B1')\n[lib.counter_next(), pyrunnative.bump()]",
		"files", nativeFiles(t, fx))
	wantValue(t, r, "[5, 5]") // a's library and extension, counting on
	b := r.sc.SessionID
	waitFor(t, "both sessions' first checkpoints", 60*time.Second, func() bool {
		return len(checkpointFiles(t, store, a)) > 0 && len(checkpointFiles(t, store, b)) > 0 &&
			s.log.count("session checkpoint") >= 2
	})
	taken := s.log.count("session checkpoint")
	wantValue(t, s.inSession(t, a, "lib.counter_save(b'A2'); pyrunnative.keep('A2')\n"+nativePeek), `[6, "A2", 6, "A2"]`)
	waitFor(t, "a's checkpoint after its second call", 60*time.Second, func() bool {
		return s.log.count("session checkpoint") > taken
	})
	r = s.inSession(t, b, "lib.counter_next(); lib.counter_save(b'lost'); pyrunnative.keep('lost')\nimport js\njs.Deno.exit(3)")
	if r.sc.Status == "success" || r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 ||
		!strings.Contains(r.text, "continues from its checkpoint after call 1") {
		t.Fatalf("b's call that killed the worker: status %s, checkpoint %+v, want a failure going back to call 1\n%s", r.sc.Status, r.sc.Checkpoint, r.text)
	}
	r = s.inSession(t, a, nativePeek)
	wantValue(t, r, `[7, "A2", 7, "A2"]`)
	if r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 2 {
		t.Errorf("a's first call after the worker died names checkpoint %+v, want after call 2", r.sc.Checkpoint)
	}
	wantValue(t, s.inSession(t, b, nativePeek), `[6, "B", 6, "B1"]`)
}

// forgeRecord rewrites session id's latest record in the dir: store as
// whoever holds the store's key could: edit changes, in place, the
// contents of the file at path in the record's files, and the record is
// stored and authenticated again, its header and sizes kept. The
// layouts: supervisor/checkpoint/format.go (the record),
// pyodide-host/checkpoint.ts (the files' blob after the memory).
func forgeRecord(t *testing.T, store, id, keyFile, path string, edit func([]byte)) {
	t.Helper()
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(store, id+".ckpt")
	rec, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) < 12+sha256.Size || string(rec[:8]) != "PYRUNCK2" {
		t.Fatalf("%s is not a pyrun record", name)
	}
	head := rec[:12+binary.LittleEndian.Uint32(rec[8:12])]
	var meta struct{ Mem int64 }
	if err := json.Unmarshal(head[12:], &meta); err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	payload, err := dec.DecodeAll(rec[len(head):len(rec)-sha256.Size], nil)
	if err != nil {
		t.Fatal(err)
	}
	files := payload[meta.Mem:]
	if !bytes.HasPrefix(files, []byte("PYRUNFS1")) {
		t.Fatalf("the record of %s holds no files' blob", id)
	}
	n := int(binary.LittleEndian.Uint32(files[8:12]))
	var blob struct {
		Entries []struct {
			P, T string
			N    int
		}
	}
	if err := json.Unmarshal(files[12:12+n], &blob); err != nil {
		t.Fatalf("the record's files' blob: %v", err)
	}
	found, off := false, 12+n
	for _, e := range blob.Entries {
		if e.T == "f" {
			if e.P == path {
				edit(files[off : off+e.N])
				found = true
			}
			off += e.N
		}
	}
	if !found {
		t.Fatalf("the record of %s holds no file %s", id, path)
	}
	body := rawFrame(bytes.Clone(head), payload)
	mac := hmac.New(sha256.New, bytes.TrimSuffix(key, []byte("\n")))
	mac.Write(body)
	if err := os.WriteFile(name+".forged", mac.Sum(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name+".forged", name); err != nil {
		t.Fatal(err)
	}
}

// rawFrame appends to dst a zstd frame holding payload in raw blocks (RFC
// 8878): compressing a session's heap again would cost the test seconds
// under -race. Its window, 1 MiB, is within what pyrun's decoder allows.
func rawFrame(dst, payload []byte) []byte {
	const block = 128 << 10
	dst = binary.LittleEndian.AppendUint32(dst, 0xFD2FB528)
	dst = append(dst, 0xC0, (20-10)<<3) // an 8-byte content size; a window of 2^20
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(payload)))
	for len(payload) > 0 {
		n := min(len(payload), block)
		last := 0
		if n == len(payload) {
			last = 1
		}
		h := uint32(n<<3 | last) // type 0: raw
		dst = append(dst, byte(h), byte(h>>8), byte(h>>16))
		dst, payload = append(dst, payload[:n]...), payload[n:]
	}
	return dst
}

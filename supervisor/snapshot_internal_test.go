package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/internal/testtier"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

func logFor(t *testing.T) hclog.Logger { return testlog.New(t) }

// fakeRuntime is a runtime folder layout without Deno: enough for what
// snapshots do before a Deno process starts. deno, when set, is a shell
// script standing in for the Deno binary.
func fakeRuntime(t *testing.T, deno string) *Runtime {
	t.Helper()
	root := t.TempDir()
	rt := &Runtime{
		Dir: filepath.Join(root, "host-0123456789abcdef"), Hash: "0123456789abcdef",
		DenoDir: filepath.Join(root, "deno-cache"), WorkDir: filepath.Join(root, "work"),
		SnapshotDir: filepath.Join(root, "snapshots"), PackageDir: filepath.Join(root, "packages"),
		Pyodide: "314.0.7", Python: "3.14.2",
		Deno: filepath.Join(root, "deno"),
	}
	for _, d := range []string{rt.Dir, rt.DenoDir, rt.WorkDir, rt.SnapshotDir, rt.PackageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if deno == "" {
		deno = "echo 'no Deno here' >&2; exit 1"
	}
	if err := os.WriteFile(rt.Deno, []byte("#!/bin/sh\n"+deno+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return rt
}

// noWall is the configuration of the tests whose stand-in Deno is a shell
// script: it runs other programs (head, sleep), which the OS sandbox
// forbids workers and the snapshot maker alike.
var noWall = Config{OSSandbox: oswall.ModeOff}

// makerWrites is a stand-in maker that writes n random bytes as the snapshot.
func makerWrites(n int) string { return fmt.Sprintf("head -c %d /dev/urandom", n) }

func TestSnapshotKey(t *testing.T) {
	rt := &Runtime{Hash: "aaaa", Pyodide: "314.0.7"}
	base := snapshotKey(rt)
	if len(base) != 32 {
		t.Fatalf("key %q, want 32 hex digits", base)
	}
	if got := snapshotKey(rt); got != base {
		t.Errorf("the same inputs give keys %s and %s", base, got)
	}
	for name, other := range map[string]string{
		"runtime": snapshotKey(&Runtime{Hash: "bbbb", Pyodide: "314.0.7"}),
		"pyodide": snapshotKey(&Runtime{Hash: "aaaa", Pyodide: "315.0.0"}),
	} {
		if other == base {
			t.Errorf("a change of %s keeps the key %s", name, base)
		}
	}
}

// TestNoDenoProcessMayWrite checks the permissions of every kind of Deno
// process pyrun starts: none may write, run programs, read the environment
// or load native code, and only a worker started from a snapshot may read
// that one snapshot file.
func TestNoDenoProcessMayWrite(t *testing.T) {
	rt := fakeRuntime(t, "")
	snap := &Snapshot{Path: filepath.Join(rt.SnapshotDir, "k.snap"), Size: 123}
	for name, l := range map[string]launch{
		"plain worker": {}, "snapshot worker": {snapshot: snap}, "snapshot maker": {makeSnapshot: true},
	} {
		args, err := denoArgs(rt, Python, Config{}.withDefaults(), l)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var reads []string
		for _, a := range args {
			for _, bad := range []string{"--allow-write", "-W", "--allow-all", "-A", "--allow-run", "--allow-env", "--allow-ffi", "--allow-sys", "--allow-import"} {
				if a == bad || strings.HasPrefix(a, bad+"=") {
					t.Errorf("%s: granted %s", name, a)
				}
			}
			if v, ok := strings.CutPrefix(a, "--allow-read="); ok {
				reads = strings.Split(v, ",")
			}
			if l.makeSnapshot && strings.HasPrefix(a, "--allow-net") {
				t.Errorf("%s: granted %s", name, a)
			}
		}
		for _, r := range reads {
			if !strings.HasPrefix(r, rt.Dir+string(filepath.Separator)) && r != snap.Path &&
				(r != rt.PackageDir || l.makeSnapshot) {
				t.Errorf("%s: may read %s, outside the worker program", name, r)
			}
		}
		if got := slices.Contains(reads, snap.Path); got != (l.snapshot != nil) {
			t.Errorf("%s: may read the snapshot: %v", name, got)
		}
		var hc hostConfig
		if err := json.Unmarshal([]byte(args[len(args)-1]), &hc); err != nil {
			t.Fatalf("%s: host config: %v", name, err)
		}
		if hc.MakeSnapshot != l.makeSnapshot || (hc.Snapshot != "") != (l.snapshot != nil) {
			t.Errorf("%s: host config %+v", name, hc)
		}
		if l.snapshot != nil && hc.SnapshotSize != snap.Size {
			t.Errorf("%s: snapshot size %d, want %d", name, hc.SnapshotSize, snap.Size)
		}
	}
}

// TestSnapshotIsMadeThroughStdout makes a snapshot with a stand-in maker
// and checks what is installed, then every way a snapshot on disk is
// refused.
func TestSnapshotIsMadeThroughStdout(t *testing.T) {
	rt := fakeRuntime(t, makerWrites(100_000))
	log := logFor(t)
	snap, err := EnsureSnapshot(t.Context(), rt, noWall, log)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Built || snap.Size != 100_000 || len(snap.SHA256) != 64 {
		t.Errorf("snapshot %+v, want one just built, of 100000 bytes, with a checksum", snap)
	}
	st, err := os.Stat(snap.Path)
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("snapshot file: %v, mode %v; want read-only", err, st.Mode())
	}
	entries, _ := os.ReadDir(rt.SnapshotDir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	again, err := EnsureSnapshot(t.Context(), rt, noWall, log)
	if err != nil || again.Built || again.SHA256 != snap.SHA256 {
		t.Errorf("second EnsureSnapshot: %+v, %v; want the same snapshot, not built again", again, err)
	}

	_, metaPath := snapshotPaths(rt, snap.Key)
	meta, _ := os.ReadFile(metaPath)
	body, _ := os.ReadFile(snap.Path)
	for _, tc := range []struct {
		name    string
		damage  func()
		wantErr string
	}{
		{"no description", func() { os.Remove(metaPath) }, errNoSnapshot.Error()},
		{"another key", func() {
			os.WriteFile(metaPath, []byte(strings.Replace(string(meta), snap.Key, "0000", 1)), 0o644)
		}, "made for something else"},
		{"another runtime", func() {
			os.WriteFile(metaPath, []byte(strings.Replace(string(meta), `"runtime": "`+rt.Hash, `"runtime": "ffff`, 1)), 0o644)
		}, "made for something else"},
		{"truncated", func() { replaceFile(t, snap.Path, body[:len(body)-1]) }, "has 99999 bytes"},
		{"corrupt", func() {
			bad := slices.Clone(body)
			bad[len(bad)/2] ^= 0xff
			replaceFile(t, snap.Path, bad)
		}, "is corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replaceFile(t, snap.Path, body)
			if err := os.WriteFile(metaPath, meta, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := openSnapshot(rt); err != nil {
				t.Fatalf("the intact snapshot is refused: %v", err)
			}
			tc.damage()
			_, err := openSnapshot(rt)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("openSnapshot: %v, want an error saying %q", err, tc.wantErr)
			}
			// EnsureSnapshot makes a new one rather than use it.
			fresh, err := EnsureSnapshot(t.Context(), rt, noWall, log)
			if err != nil || !fresh.Built {
				t.Fatalf("EnsureSnapshot after damage: %+v, %v; want a new snapshot", fresh, err)
			}
			if _, err := openSnapshot(rt); err != nil {
				t.Errorf("the new snapshot is refused: %v", err)
			}
			body, _ = os.ReadFile(fresh.Path)
			meta, _ = os.ReadFile(metaPath)
			snap = fresh
		})
	}
}

func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".test"
	if err := os.WriteFile(tmp, b, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotMakerFailures(t *testing.T) {
	for _, tc := range []struct{ name, maker, want string }{
		{"exits with an error", "echo 'boom: no pyodide' >&2; exit 3", "boom: no pyodide"},
		{"writes nothing", "exit 0", "wrote nothing"},
		{"hangs", "exec sleep 60", "not done after 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := fakeRuntime(t, tc.maker)
			began := time.Now()
			_, err := EnsureSnapshot(t.Context(), rt, Config{StartTimeout: time.Second, OSSandbox: oswall.ModeOff}, logFor(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EnsureSnapshot: %v, want an error saying %q", err, tc.want)
			}
			if d := time.Since(began); d > 20*time.Second {
				t.Errorf("failing took %s", d)
			}
			entries, _ := os.ReadDir(rt.SnapshotDir)
			for _, e := range entries {
				if e.Name() != ".lock" {
					t.Errorf("left behind: %s", e.Name())
				}
			}
			// A pool's starts then go without a snapshot.
			if snap, _ := newSnapshots(rt, logFor(t)).get(t.Context(), Config{StartTimeout: time.Second, OSSandbox: oswall.ModeOff}); snap != nil {
				t.Errorf("get = %+v, want nil", snap)
			}
		})
	}
}

// TestPoolStopsUsingASnapshotThatFails checks the pool's bookkeeping: a
// start that fails from a snapshot makes it check the file again, a second
// failure in a row makes it start plainly, a success forgives, and a file
// replaced on disk is checked before use.
func TestPoolStopsUsingASnapshotThatFails(t *testing.T) {
	rt := fakeRuntime(t, makerWrites(50_000))
	s := newSnapshots(rt, logFor(t))
	ctx := t.Context()
	first, _ := s.get(ctx, noWall)
	if first == nil || !first.Built {
		t.Fatalf("get = %+v, want a snapshot just built", first)
	}
	if again, _ := s.get(ctx, noWall); again != first {
		t.Errorf("a second get checks again: %p, want %p", again, first)
	}
	s.started(first, nil, "")
	s.started(first, nil, "snapshot not used: Snapshot has invalid magic number")
	second, _ := s.get(ctx, noWall)
	if second == nil || second == first || second.Built || second.SHA256 != first.SHA256 {
		t.Fatalf("after a failed start, get = %+v; want the same file, checked again", second)
	}
	s.started(second, nil, "") // a success forgives
	s.started(second, context.DeadlineExceeded, "")
	third, _ := s.get(ctx, noWall)
	if third == nil || third == second {
		t.Fatalf("after one more failure, get = %+v; want the file checked again", third)
	}
	s.started(third, context.DeadlineExceeded, "")
	if got, _ := s.get(ctx, noWall); got != nil {
		t.Errorf("after two failures in a row, get = %+v, want nil (plain starts)", got)
	}

	// A fresh pool, and a file replaced behind its back.
	s = newSnapshots(rt, logFor(t))
	before, verify := s.get(ctx, noWall)
	if before == nil || verify == nil || verify() != nil {
		t.Fatalf("a new pool's first get = %+v (check given: %t); want the snapshot there, its bytes checked at the first start", before, verify != nil)
	}
	body, _ := os.ReadFile(before.Path)
	body[0] ^= 0xff
	replaceFile(t, before.Path, body)
	after, verify := s.get(ctx, noWall)
	if after == nil || after == before || !after.Built || verify != nil {
		t.Errorf("after the file changed, get = %+v; want a new snapshot made", after)
	}

	// A new pool finds a corrupt snapshot whose description is intact:
	// its first start's check fails, and the next start makes a new one.
	body, _ = os.ReadFile(after.Path)
	body[len(body)/2] ^= 0xff
	replaceFile(t, after.Path, body)
	s = newSnapshots(rt, logFor(t))
	bad, verify := s.get(ctx, noWall)
	if bad == nil || verify == nil {
		t.Fatalf("get = %+v (check given: %t); want the snapshot and its check", bad, verify != nil)
	}
	err := verify()
	if err == nil || !strings.Contains(err.Error(), "is corrupt") {
		t.Fatalf("verify: %v, want the checksum mismatch", err)
	}
	if err2 := verify(); err2 != err {
		t.Errorf("verify again: %v, want the first answer %v, not a second check", err2, err)
	}
	s.started(bad, err, "")
	good, verify := s.get(ctx, noWall)
	if good == nil || !good.Built || verify != nil {
		t.Errorf("after the failed check, get = %+v; want a new snapshot made", good)
	}
}

// TestWorkerStartsPlainlyFromABadSnapshot gives a real worker a snapshot it
// cannot use: it must start anyway and say why.
func TestWorkerStartsPlainlyFromABadSnapshot(t *testing.T) {
	rt := realRuntime(t)
	garbage := make([]byte, 1<<20)
	_, _ = rand.Read(garbage)
	path := filepath.Join(t.TempDir(), "garbage.snap")
	if err := os.WriteFile(path, garbage, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int64
		want string
	}{
		{"not a snapshot", int64(len(garbage)), "invalid magic number"},
		{"wrong size", 42, "not 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}.withDefaults()
			cmd := exec.Command(rt.Deno)
			if err := workerCmd(cmd, rt, Python, cfg, launch{snapshot: &Snapshot{Path: path, Size: tc.size}}); err != nil {
				t.Fatal(err)
			}
			w, err := startWorker(t.Context(), "worker-1", cmd, cfg, logFor(t), nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.close()
			if w.ready.Snapshot || !strings.Contains(w.ready.SnapshotError, tc.want) {
				t.Errorf("ready: snapshot %v, snapshot_error %q; want false and an error saying %q",
					w.ready.Snapshot, w.ready.SnapshotError, tc.want)
			}
			res := w.runCall(t.Context(), Job{ID: "1", Code: "print(6 * 7)"}, cfg, newTranscript(cfg.MaxOutput, nil))
			if res.Status != StatusSuccess || res.Stdout != "42\n" {
				t.Errorf("call on the plain worker: %s %q %s", res.Status, res.Stdout, res.Error)
			}
		})
	}
}

// realRuntime provisions the real runtime (Deno and Pyodide) in the default
// runtime folder, as pyrun does.
func realRuntime(t *testing.T) *Runtime {
	t.Helper()
	testtier.Runtime(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	rt, err := Provision(ctx, DefaultRuntimeRoot(), io.Discard, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestOldSnapshotsArePruned checks what making a snapshot clears away:
// snapshots of runtimes that are gone or unused for staleAfter, bytes
// without a description, and leftovers of makers that died; and what it
// keeps: snapshots of runtimes still there and in use.
func TestOldSnapshotsArePruned(t *testing.T) {
	rt := fakeRuntime(t, makerWrites(1000))
	root := filepath.Dir(rt.Dir)
	if err := os.MkdirAll(filepath.Join(root, "host-other"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-staleAfter - time.Hour)
	put := func(name, body string, mtime time.Time) {
		t.Helper()
		p := filepath.Join(rt.SnapshotDir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	meta := func(runtime string) string { return `{"runtime": "` + runtime + `"}` }
	now := time.Now()
	put("inuse.json", meta("other"), now) // another pyrun version, still in use: kept
	put("inuse.snap", "x", now)
	put("gone.json", meta("removed"), now) // its runtime is gone
	put("gone.snap", "x", now)
	put("stale.json", meta("other"), old) // unused for too long
	put("stale.snap", "x", old)
	put("orphan.snap", "x", now)                 // no description
	put("k.tmp-123", "x", now.Add(-2*time.Hour)) // a maker that died
	put("k.tmp-456", "x", now)                   // a maker at work: kept
	snap, err := EnsureSnapshot(t.Context(), rt, noWall, logFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(rt.SnapshotDir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".lock", snap.Key + ".json", snap.Key + ".snap", "inuse.json", "inuse.snap", "k.tmp-456"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

package supervisor_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// TestDisplaysReachTheResult runs display(), the last expression's rich form
// and the caps through the real worker: the supervisor carries mime types
// and bytes, in order.
func TestDisplaysReachTheResult(t *testing.T) {
	p := realPool(t, supervisor.Config{Workers: 1, MaxDisplays: 3, Network: supervisor.NetworkNone})
	res := run(t, p, supervisor.Job{Code: `
class Svg:
    def _repr_svg_(self): return "<svg/>"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": "b", "text/html": "<b>b</b>", "image/png": b"\x89PNG"}
print("before")
display(Svg())
print("after")
display({"a": 1}, Bundle())
display("over the cap")
Svg()
`})
	if res.Status != supervisor.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	want := []supervisor.Display{
		{MIMEType: "image/svg+xml", Data: []byte("<svg/>")},
		{MIMEType: "text/plain", Data: []byte("{'a': 1}")},
		{MIMEType: "image/png", Data: []byte("\x89PNG")},
	}
	if len(res.Displays) != len(want) {
		t.Fatalf("displays: %+v", res.Displays)
	}
	for i, d := range want {
		if res.Displays[i].MIMEType != d.MIMEType || !bytes.Equal(res.Displays[i].Data, d.Data) {
			t.Errorf("display %d: %s %q, want %s %q", i, res.Displays[i].MIMEType, res.Displays[i].Data, d.MIMEType, d.Data)
		}
	}
	if res.DisplaysDropped != 2 {
		t.Errorf("dropped %d displays, want 2 (the fourth display and the last expression)", res.DisplaysDropped)
	}
	if res.Stdout != "before\nafter\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

// TestFilesInAndOut: input files land in the working directory, files
// written under /output/ come back, and /output/ is empty at the next
// stateless call unless the call keeps it.
func TestFilesInAndOut(t *testing.T) {
	spool := t.TempDir()
	p := realPool(t, supervisor.Config{Workers: 1, Network: supervisor.NetworkNone, SpoolDir: spool})
	bin := []byte{0, 1, 2, 255, 254}
	res := run(t, p, supervisor.Job{
		Files: []supervisor.InputFile{{Path: "data/in.txt", Data: []byte("héllo")}, {Path: "b.bin", Data: bin}},
		Code: `
import os
os.makedirs("/output/sub", exist_ok=True)
open("/output/sub/out.csv", "w").write(open("data/in.txt").read().upper())
open("/output/copy.bin", "wb").write(open("b.bin", "rb").read())
sorted(os.listdir("."))`})
	if res.Status != supervisor.StatusSuccess || res.Value != "[\n  \"b.bin\",\n  \"data\"\n]" {
		t.Fatalf("status %s value %s: %s", res.Status, res.Value, res.Error)
	}
	if len(res.Files) != 2 || res.Files[0].Path != "copy.bin" || !bytes.Equal(fileData(t, res.Files[0]), bin) ||
		res.Files[1].Path != "sub/out.csv" || string(fileData(t, res.Files[1])) != "HÉLLO" || res.Files[1].MIMEType != "text/csv" {
		t.Fatalf("files: %+v", res.Files)
	}
	// They wait in the spool folder, for the result's holder to take.
	if entries, _ := os.ReadDir(spool); len(entries) != 2 {
		t.Errorf("%d files in the spool folder, want 2", len(entries))
	}
	res.RemoveFiles()
	if entries, _ := os.ReadDir(spool); len(entries) != 0 {
		t.Errorf("%d files in the spool folder after RemoveFiles, want none", len(entries))
	}
	res = run(t, p, supervisor.Job{Code: `import os; os.listdir("/output")`})
	if res.Value != "[]" || len(res.Files) != 0 {
		t.Errorf("the next stateless call sees /output/: %s %+v", res.Value, res.Files)
	}
	// Large items come split over several events (1 MiB each) and are
	// put together again.
	res = run(t, p, supervisor.Job{Code: `
import hashlib, random
data = random.Random(1).randbytes(2_500_000)
open("/output/big.bin", "wb").write(data)
display({"image/png": data[:2_100_000]}, raw=True)
hashlib.sha256(data).hexdigest()`})
	if len(res.Files) != 1 || len(res.Displays) != 1 || res.Files[0].Size != 2_500_000 {
		t.Fatalf("big file and display: %s %s", res.Status, res.Error)
	}
	big := fileData(t, res.Files[0])
	sum := sha256.Sum256(big)
	if res.Value != `"`+hex.EncodeToString(sum[:])+`"` || !bytes.Equal(res.Displays[0].Data, big[:2_100_000]) {
		t.Errorf("big file or display differs: sha256 %s, worker says %s", hex.EncodeToString(sum[:]), res.Value)
	}
	run(t, p, supervisor.Job{Code: `open("/output/kept.txt", "w").write("1")`, InSession: supervisor.SessionCall{KeepOutput: true}})
	res = run(t, p, supervisor.Job{Code: `open("/output/new.txt", "w").write("2"); open("/output/kept.txt").read()`, InSession: supervisor.SessionCall{KeepOutput: true}})
	if res.Value != `"1"` || len(res.Files) != 1 || res.Files[0].Path != "new.txt" {
		t.Errorf("a call that keeps /output/ sees its files and gets back only the new ones: %s %+v", res.Value, res.Files)
	}
}

// TestMounts: a read-only mount is readable and not writable (a clean
// PermissionError, the worker lives on), a read-write one takes writes.
func TestMounts(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	roM, err := supervisor.ParseMount(ro + ":/data")
	if err != nil {
		t.Fatal(err)
	}
	rwM, err := supervisor.ParseMount(rw + ":/scratch:rw")
	if err != nil {
		t.Fatal(err)
	}
	p := realPool(t, supervisor.Config{Workers: 1, Network: supervisor.NetworkNone, Mounts: []supervisor.Mount{roM, rwM}})
	res := run(t, p, supervisor.Job{Code: `
r = [open("/data/in.txt").read()]
try:
    open("/data/new.txt", "w").write("x")
except OSError as e:
    r.append(type(e).__name__)
open("/scratch/out.txt", "w").write("to the host")
r`})
	if res.Status != supervisor.StatusSuccess || !strings.Contains(res.Value, `"from the host"`) || !strings.Contains(res.Value, `"PermissionError"`) {
		t.Fatalf("status %s value %s: %s", res.Status, res.Value, res.Error)
	}
	if _, err := os.Stat(filepath.Join(ro, "new.txt")); err == nil {
		t.Error("a write reached the read-only mount")
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "out.txt")); string(b) != "to the host" {
		t.Errorf("read-write mount: %q", b)
	}
	res = run(t, p, supervisor.Job{Code: `open("/data/in.txt").read()`})
	if res.Value != `"from the host"` {
		t.Errorf("the next call on the same worker: %s %s", res.Value, res.Error)
	}
}

// fileData reads an /output/ file of a result.
func fileData(t *testing.T, f supervisor.OutputFile) []byte {
	t.Helper()
	b, err := f.Data.ReadAll()
	if err != nil {
		t.Fatalf("/output/%s: %v", f.Path, err)
	}
	if int64(len(b)) != f.Size {
		t.Errorf("/output/%s: %d bytes, its size says %d", f.Path, len(b), f.Size)
	}
	return b
}

// An input file's path may hold no name over 255 bytes (NAME_MAX): the
// workers' file systems refuse such names, and their folder walks cut them
// short (issue 26, item 5). UTF-8 counts in bytes.
func TestCheckInputPathNameLength(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{strings.Repeat("a", 255), true},
		{"dir/" + strings.Repeat("a", 255), true},
		{strings.Repeat("é", 127), true}, // 254 bytes
		{strings.Repeat("a", 256), false},
		{strings.Repeat("a", 256) + "/x", false},
		{"x/" + strings.Repeat("é", 128), false}, // 256 bytes
	} {
		err := supervisor.CheckInputPath(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("%d bytes, %q...: %v, want ok %v", len(tc.path), tc.path[:min(len(tc.path), 12)], err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "longer than 255 bytes") {
			t.Errorf("%q...: %v, want the reason", tc.path[:12], err)
		}
	}
}

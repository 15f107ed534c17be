package main

// Names over 255 bytes and file modes, in every engine (issue 26, items 5
// and 9): end to end, with real workers and a real read-write host folder.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileNamesAndModes: no engine makes a name over 255 bytes (Emscripten's
// file system took one, and its folder walks then cut it short: such files
// outlived the clean-up, another client read them, and one in /output/
// ended the R worker), a name made past that rule anyway is removed by the
// clean-up and skipped by the output collection, and no engine gives a
// file in a mounted folder setuid, setgid, sticky or write for others,
// whether it makes the file or changes its mode.
func TestFileNamesAndModes(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(ro, "in.txt"), filepath.Join(rw, "host.txt")} {
		if err := os.WriteFile(f, []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newLanguageServer(t, "python,r,javascript", "--workers", "1", "--r-workers", "1", "--js-workers", "1",
		"--mount", ro+":/data", "--mount", rw+":/shared:rw")
	// Every file and folder on the host keeps clear of the bits; the two
	// files there before keep their 0644.
	checkHost := func(t *testing.T) {
		t.Helper()
		for _, root := range []string{ro, rw} {
			err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, err := os.Lstat(path)
				if err != nil {
					return err
				}
				if bits := info.Mode() & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o002); bits != 0 {
					t.Errorf("%s on the host has mode %s", path, info.Mode())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{filepath.Join(ro, "in.txt"), filepath.Join(rw, "host.txt")} {
			if info, err := os.Stat(f); err != nil || info.Mode().Perm() != 0o644 {
				t.Errorf("%s: %v %v, want 0644 as it was", f, info.Mode(), err)
			}
		}
	}
	value := func(t *testing.T, r result) map[string]any {
		t.Helper()
		wantStatus(t, r, "success")
		var v map[string]any
		if err := json.Unmarshal(r.sc.ReturnValue, &v); err != nil {
			t.Fatalf("return_value %s: %v", r.sc.ReturnValue, err)
		}
		return v
	}
	want := func(t *testing.T, v map[string]any, key string, w any) {
		t.Helper()
		if got := fmt.Sprint(v[key]); got != fmt.Sprint(w) {
			t.Errorf("%s: %s, want %v", key, got, w)
		}
	}
	files := func(r result) string {
		var paths []string
		for _, f := range r.sc.Files {
			paths = append(paths, f.Path)
		}
		return strings.Join(paths, ",")
	}

	t.Run("python", func(t *testing.T) {
		r := s.runIn(t, "run_python_code", "python_code", `
import errno, os, pyodide_js
out = {}
for d in (".", "/tmp", "/output", "/shared"):
    try:
        open(d + "/" + "n" * 256, "w")
        out[d] = "made"
    except OSError as e:
        out[d] = errno.errorcode[e.errno]
try:
    os.rename("/tmp", "/tmp/" + "é" * 128)
except OSError as e:
    out["rename"] = errno.errorcode[e.errno]
open("/shared/py.txt", "w").write("x")
os.mkdir("/shared/pydir", 0o777)
os.close(os.open("/shared/py4777", os.O_CREAT | os.O_WRONLY, 0o4777))
for m in (0o4755, 0o2755, 0o1777, 0o646):
    try:
        os.chmod("/shared/host.txt", m)
        out[oct(m)] = "changed"
    except OSError as e:
        out[oct(m)] = errno.errorcode[e.errno]
os.chmod("/shared/host.txt", 0o600)
os.chmod("/shared/host.txt", 0o644)
# Names made past the guard, by MEMFS's own node operations.
for d in ("/tmp", "/home/pyodide", "/output"):
    node = pyodide_js.FS.lookupPath(d).node
    node.node_ops.mknod(node, "m" * 300, 0o100644, 0)
open("/output/ok.txt", "w").write("ok")
out`)
		v := value(t, r)
		for _, key := range []string{".", "/tmp", "/output", "/shared", "rename"} {
			want(t, v, key, "ENAMETOOLONG")
		}
		for _, key := range []string{"0o4755", "0o2755", "0o1777", "0o646"} {
			want(t, v, key, "EPERM")
		}
		if got := files(r); got != "ok.txt" {
			t.Errorf("files %q, want ok.txt alone", got)
		}
		wantValue(t, s.runIn(t, "run_python_code", "python_code", `import os
[os.listdir(d) for d in ("/tmp", ".", "/output")]`), "[[],[],[]]")
		checkHost(t)
	})

	t.Run("r", func(t *testing.T) {
		r := s.runIn(t, "run_r_code", "r_code", `
long <- strrep("n", 256)
out <- list()
for (d in c(".", "/tmp", "/output", "/shared")) out[[d]] <- suppressWarnings(file.create(file.path(d, long)))
writeLines("x", "/shared/r.txt")
dir.create("/shared/rdir", mode = "0777")
for (m in c("4755", "2755", "1777", "646")) out[[m]] <- Sys.chmod("/shared/host.txt", m)
out$back <- Sys.chmod("/shared/host.txt", "644")
# R's library is not the call's to change.
out$library <- suppressWarnings(file.create("/usr/lib/R/library/stats/planted"))
# Names made past the guard, by MEMFS's own node operations.
invisible(.Call(webr:::ffi_eval_js, "(() => { for (const d of ['/tmp', '/home/web_user', '/output']) { const n = Module.FS.lookupPath(d).node; n.node_ops.mknod(n, 'm'.repeat(300), 0o100644, 0); } return 1; })()", FALSE))
writeLines("ok", "/output/ok.txt")
out`)
		v := value(t, r)
		for _, key := range []string{".", "/tmp", "/output", "/shared", "4755", "2755", "1777", "646", "library"} {
			want(t, v, key, false)
		}
		want(t, v, "back", true)
		if got := files(r); got != "ok.txt" {
			t.Errorf("files %q, want ok.txt alone", got)
		}
		// The same worker serves the next call, and finds nothing left.
		wantValue(t, s.runIn(t, "run_r_code", "r_code",
			`c(length(setdiff(list.files("/tmp", all.files = TRUE, no.. = TRUE), basename(tempdir()))), length(list.files(all.files = TRUE, no.. = TRUE)), length(list.files("/output")), file.exists("/usr/lib/R/library/stats/planted"))`),
			"[0,0,0,0]")
		checkHost(t)
	})

	t.Run("javascript", func(t *testing.T) {
		host, err := filepath.EvalSymlinks(rw)
		if err != nil {
			t.Fatal(err)
		}
		r := s.runIn(t, "run_javascript_code", "javascript_code", `import * as fs from "node:fs";
const fails = (f: () => unknown) => { try { f(); return "done"; } catch (e) { return (e as Error).message; } };
const host = `+"`"+host+"`"+`;
pyrun.writeFile("/shared/js/made.txt", "x");
({
  mount: fails(() => pyrun.writeFile("/shared/" + "n".repeat(256), "x")),
  output: fails(() => pyrun.writeFile("/output/" + "é".repeat(128), "x")),
  fchmod: fails(() => fs.fchmodSync(fs.openSync(host + "/host.txt", "r"), 0o4777)),
  chmod: fails(() => Deno.chmodSync(host + "/host.txt", 0o4777)),
  read: pyrun.readTextFile("/shared/host.txt"),
  ls: pyrun.readDir("/data").join(),
})`)
		v := value(t, r)
		for _, key := range []string{"mount", "output"} {
			if got := fmt.Sprint(v[key]); !strings.Contains(got, "255 bytes") {
				t.Errorf("%s: %q, want a name refused as longer than 255 bytes", key, got)
			}
		}
		for _, key := range []string{"fchmod", "chmod"} {
			if got := fmt.Sprint(v[key]); !strings.Contains(got, "Requires") {
				t.Errorf("%s: %q, want Deno's refusal: the code has no permission on the host", key, got)
			}
		}
		want(t, v, "read", "host")
		want(t, v, "ls", "in.txt")
		if b, err := os.ReadFile(filepath.Join(rw, "js", "made.txt")); err != nil || string(b) != "x" {
			t.Errorf("pyrun.writeFile into the :rw mount: %q %v", b, err)
		}
		checkHost(t)
	})

	// Deno checks no permission for a mode or owner change on a file opened
	// for reading, and Python reaches Deno's node:fs through `import js`:
	// the OS sandbox's filter refuses the change (supervisor/oswall).
	t.Run("python through node:fs", func(t *testing.T) {
		code := `import js
fs = js.process.getBuiltinModule("node:fs")
out = {}
for name, path in (("ro", RO + "/in.txt"), ("rw", RW + "/host.txt")):
    fd = fs.openSync(path, "r")
    for what, f in (("fchmod", lambda: fs.fchmodSync(fd, 0o4777)), ("fchown", lambda: fs.fchownSync(fd, 0, 0))):
        try:
            f()
            out[name + " " + what] = "done"
        except Exception as e:
            out[name + " " + what] = str(e)
    fs.closeSync(fd)
out`
		for name, dir := range map[string]string{"RO": ro, "RW": rw} {
			host, err := filepath.EvalSymlinks(dir)
			if err != nil {
				t.Fatal(err)
			}
			code = fmt.Sprintf("%s = %q\n", name, host) + code
		}
		v := value(t, s.runIn(t, "run_python_code", "python_code", code))
		for _, key := range []string{"ro fchmod", "ro fchown", "rw fchmod", "rw fchown"} {
			if got := fmt.Sprint(v[key]); !strings.Contains(got, "not permitted") {
				t.Errorf("%s: %q, want the OS sandbox's refusal", key, got)
			}
		}
		checkHost(t)
	})

	t.Run("input files", func(t *testing.T) {
		for _, tool := range [][2]string{{"run_python_code", "python_code"}, {"run_r_code", "r_code"}, {"run_javascript_code", "javascript_code"}} {
			// A tool error (no structured content, which callTool reports).
			r, err := s.callTool(t.Context(), tool[0], map[string]any{tool[1]: "1", "files": map[string]any{strings.Repeat("n", 256): "x"}})
			if err == nil || !strings.Contains(err.Error(), "longer than 255 bytes") {
				t.Errorf("%s with a 256-byte file name: %v %q, want a tool error naming the limit", tool[0], err, r.text)
			}
		}
	})
}

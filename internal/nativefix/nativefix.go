// Package nativefix builds real native code for Pyodide in tests, offline,
// with Debian's emscripten (emcc; .ci/run installs it): side modules like
// those of numpy or any package with a shared library, small enough to
// build in about a second each.
//
//	fx := nativefix.Build(t)
//	s := newServer(t, "--wheelhouse", fx.Wheelhouse)
//
// Counter, libcounter.so, is a stateful C library used through ctypes
// (counter_next counts, counter_apply calls through a table of function
// pointers, counter_save/counter_saved keep a malloc'ed string).
// Extension, pyrunnative.cpython-314-wasm32-emscripten.so, is a CPython
// extension module written without Python.h (testdata/pyrunnative.c) whose
// state is in C statics: bump() counts, faster() swaps the function pointer
// bump() steps with, keep(obj)/kept() hold a Python object. Wheel is the
// extension as a binary wheel tagged for Pyodide 314
// (cp314-cp314-pyemscripten_2026_0_wasm32, from the abi_version 2026_0 in
// Pyodide's pyodide-lock.json), for a --wheelhouse.
package nativefix

import (
	"archive/zip"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/internal/testtier"
)

//go:embed testdata/counter.c
var counterC []byte

//go:embed testdata/pyrunnative.c
var extensionC []byte

// Module is the extension's import name.
const Module = "pyrunnative"

// WheelTag is the wheel tag Pyodide 314 (emscripten 5.0.3, ABI 2026_0)
// loads binary wheels with.
const WheelTag = "cp314-cp314-pyemscripten_2026_0_wasm32"

// Fixtures are the built files.
type Fixtures struct {
	Dir        string // holds Counter and Extension
	Counter    string // libcounter.so
	Extension  string // pyrunnative.cpython-314-wasm32-emscripten.so
	Wheelhouse string // a folder with the extension's wheel only
	Wheel      string // pyrunnative-1.0-<WheelTag>.whl in Wheelhouse
}

// Build compiles the fixtures into temporary folders of t. It skips t
// under -short (it needs emcc).
func Build(t testing.TB) Fixtures {
	t.Helper()
	testtier.Needs(t, "emcc")
	emcc, err := exec.LookPath("emcc")
	if err != nil {
		t.Fatalf("emcc is not installed (Debian package emscripten; .ci/run installs it): %v", err)
	}
	fx := Fixtures{Dir: t.TempDir(), Wheelhouse: t.TempDir()}
	fx.Counter = compile(t, emcc, fx.Dir, "counter.c", counterC, "libcounter.so")
	fx.Extension = compile(t, emcc, fx.Dir, "pyrunnative.c", extensionC, Module+".cpython-314-wasm32-emscripten.so")
	so, err := os.ReadFile(fx.Extension)
	if err != nil {
		t.Fatal(err)
	}
	fx.Wheel = writeWheel(t, fx.Wheelhouse, filepath.Base(fx.Extension), so)
	return fx
}

// compile builds src as a side module (emcc -O2 -sSIDE_MODULE=1).
func compile(t testing.TB, emcc, dir, name string, src []byte, out string) string {
	t.Helper()
	srcDir := t.TempDir()
	c := filepath.Join(srcDir, name)
	if err := os.WriteFile(c, src, 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, out)
	cmd := exec.CommandContext(t.Context(), emcc, "-O2", "-sSIDE_MODULE=1", c, "-o", so)
	cmd.Dir = srcDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("emcc %s: %v\n%s", name, err, b)
	}
	return so
}

// writeWheel writes the binary wheel of the extension: the .so at the top
// of site-packages, and its dist-info (Root-Is-Purelib: false).
func writeWheel(t testing.TB, dir, soName string, so []byte) string {
	t.Helper()
	info := Module + "-1.0.dist-info"
	files := []struct {
		name string
		data []byte
	}{
		{soName, so},
		{info + "/METADATA", []byte("Metadata-Version: 2.1\nName: " + Module + "\nVersion: 1.0\n")},
		{info + "/WHEEL", []byte("Wheel-Version: 1.0\nGenerator: nativefix\nRoot-Is-Purelib: false\nTag: " + WheelTag + "\n")},
		{info + "/top_level.txt", []byte(Module + "\n")},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	record.WriteString(info + "/RECORD,,\n")
	files = append(files, struct {
		name string
		data []byte
	}{info + "/RECORD", []byte(record.String())})
	p := filepath.Join(dir, Module+"-1.0-"+WheelTag+".whl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for _, e := range files {
		w, err := zw.Create(e.name)
		if err == nil {
			_, err = w.Write(e.data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

//go:build unix

package main

import (
	"archive/zip"
	"fmt"
	"os"
	"path/filepath"
)

// writeWheel writes a small pure-Python wheel (one module, the metadata a
// wheel must have) into dir, for timing starts that preload a package.
func writeWheel(dir, name, version string) error {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", name, version)))
	if err != nil {
		return err
	}
	defer f.Close()
	info := name + "-" + version + ".dist-info/"
	zw := zip.NewWriter(f)
	for _, file := range []struct{ name, body string }{
		{name + "/__init__.py", "VERSION = " + fmt.Sprintf("%q", version) + "\n"},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "RECORD", ""},
	} {
		w, err := zw.Create(file.name)
		if err != nil {
			return err
		}
		if _, err := w.Write([]byte(file.body)); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

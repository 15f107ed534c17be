package supervisor

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// A checkpoint's file for a restore has its bytes whatever runs of zeros
// they hold: copySparse leaves them holes, which read as zeros, and the
// file is as long as the bytes, holes at its end included.
func TestCopySparseKeepsTheBytes(t *testing.T) {
	const page = 4 << 10
	data := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	zeros := func(n int) []byte { return make([]byte, n) }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, in := range map[string][]byte{
		"empty":             nil,
		"zeros":             zeros(3*page + 17),
		"data":              data(5*page + 3),
		"mixed":             join(data(page), zeros(4*page), data(10), zeros(page-10), data(3*page), zeros(2*page+5)),
		"a zero byte short": join(zeros(page-1), data(1), zeros(page)),
		"past a buffer":     join(data(300*page), zeros(200*page), data(77), zeros(300*page), data(page)),
	} {
		path := filepath.Join(t.TempDir(), "restore.bin")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		n, err := copySparse(f, bytes.NewReader(in))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil || n != int64(len(in)) {
			t.Fatalf("%s: copied %d of %d bytes: %v", name, n, len(in), err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, in) {
			t.Errorf("%s: the file's %d bytes are not the %d copied", name, len(got), len(in))
		}
	}
}

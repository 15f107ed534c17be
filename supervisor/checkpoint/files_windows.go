package checkpoint

import (
	"io"
	"os"
)

// Windows has neither flag: os.OpenFile follows a reparse point, and a
// named pipe is not a file in a folder. The type and size checks on the
// file opened still refuse anything but a regular file.
const (
	noFollow = 0
	nonBlock = 0
)

// openRead opens path read-only (flags have no Windows meaning).
func openRead(path string, _ int) (*os.File, error) { return os.Open(path) }

// mapReadOnly reads size bytes of f into memory: on Windows a record is
// read, not mapped (a mapped file there cannot be removed while mapped,
// and the Keeper removes a record's file as soon as it is kept).
func mapReadOnly(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

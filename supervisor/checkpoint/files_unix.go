//go:build !windows

package checkpoint

import (
	"os"
	"syscall"
)

// The open flags that keep a store's reads and writes off what an attacker
// with the folder could put in a file's place: O_NOFOLLOW refuses a
// symbolic link, O_NONBLOCK makes the open of a named pipe return at once.
const (
	noFollow = syscall.O_NOFOLLOW
	nonBlock = syscall.O_NONBLOCK
)

// openRead opens path read-only with flags beside O_RDONLY, O_NONBLOCK and
// O_CLOEXEC.
func openRead(path string, flags int) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// mapReadOnly maps size bytes of f read-only and shared: the page cache's
// memory, not pyrun's heap's.
func mapReadOnly(f *os.File, size int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
)

// Spooled is a file's bytes on disk, owned by one holder at a time. Safe
// for concurrent use.
type Spooled struct {
	mu   sync.Mutex
	path string // "" once moved or removed
	size int64
}

func newSpooled(path string, size int64) *Spooled {
	s := &Spooled{path: path, size: size}
	// A file nobody took (a result dropped on the way) is removed when
	// its handle is collected.
	runtime.AddCleanup(s, func(p string) { _ = os.Remove(p) }, path)
	return s
}

// SpoolFile takes the file at path as a Spooled, removed when nobody took
// it: for a Runner that makes results of its own (tests' stand-in pools).
func SpoolFile(path string) (*Spooled, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	return newSpooled(path, fi.Size()), nil
}

// ErrSpoolGone is the error of a Spooled whose file was moved or removed.
var ErrSpoolGone = errors.New("the spooled file was moved or removed")

// Size is the file's size in bytes.
func (s *Spooled) Size() int64 { return s.size }

// ReadAll reads the whole file into memory: for small files only (an
// image shown in a result, a test).
func (s *Spooled) ReadAll() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" {
		return nil, ErrSpoolGone
	}
	return os.ReadFile(s.path)
}

// MoveTo moves the file to dst (a rename; a copy when dst is on another
// file system). Afterwards the file is dst's holder's.
func (s *Spooled) MoveTo(dst string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" {
		return ErrSpoolGone
	}
	if err := os.Rename(s.path, dst); err != nil {
		if err := copyFile(s.path, dst); err != nil {
			return err
		}
		_ = os.Remove(s.path)
	}
	s.path = ""
	return nil
}

// Remove deletes the file; later calls do nothing.
func (s *Spooled) Remove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path != "" {
		_ = os.Remove(s.path)
		s.path = ""
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		_ = os.Remove(dst)
		return err
	}
	return out.Close()
}

// RemoveFiles removes the spooled files of a result that nobody keeps.
func (r *Result) RemoveFiles() {
	for _, f := range r.Files {
		if f.Data != nil {
			f.Data.Remove()
		}
	}
}

//go:build !windows

package localsock

import (
	"io/fs"
	"syscall"
)

// narrowUmask makes files created until restore is called owner-only: bind
// has no mode argument.
func narrowUmask() (restore func()) {
	old := syscall.Umask(0o177)
	return func() { syscall.Umask(old) }
}

func closeOnExec(fd int) { syscall.CloseOnExec(fd) }

// ownerOf is the uid that owns the file st describes.
func ownerOf(st fs.FileInfo) uint32 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid
	}
	return 0
}

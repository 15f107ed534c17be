//go:build !linux

package supervisor

import (
	"errors"
	"os"
	"time"
)

// residentBytes is not measured on this system: only the heap cap inside
// the worker limits its memory.
func residentBytes(pid int) (int64, error) { return 0, errors.ErrUnsupported }

// statmFile: no /proc/<pid>/statm on this system.
type statmFile struct{}

func (*statmFile) resident(int) (int64, error) { return 0, errors.ErrUnsupported }
func (*statmFile) close()                      {}

// unreadBytes is not known on this system: a worker that dies as a call
// reaches it fails that call.
func unreadBytes(f *os.File) (int, error) { return 0, errors.ErrUnsupported }

// procStat is not measured on this system: no idle CPU or thread watch.
func procStat(pid int) (time.Duration, int, error) { return 0, 0, errors.ErrUnsupported }

// engineCPU is not measured on this system (nor is procStat).
func engineCPU(pid int) (time.Duration, error) { return 0, errors.ErrUnsupported }

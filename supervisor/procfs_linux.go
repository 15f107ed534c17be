package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// residentBytes is a process's resident set size, from /proc/<pid>/statm.
func residentBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	return parseStatm(pid, b)
}

// parseStatm reads statm's second field, resident pages, without
// allocating: it is read after every call.
func parseStatm(pid int, b []byte) (int64, error) {
	i := bytes.IndexByte(b, ' ')
	var pages int64
	digits := 0
	for i++; i > 0 && i < len(b) && b[i] >= '0' && b[i] <= '9' && digits < 18; i++ {
		pages = pages*10 + int64(b[i]-'0')
		digits++
	}
	if digits == 0 || (i < len(b) && b[i] != ' ' && b[i] != '\n') {
		return 0, fmt.Errorf("unexpected /proc/%d/statm: %q", pid, b)
	}
	return pages * int64(os.Getpagesize()), nil
}

// statmFile reads one process's /proc/<pid>/statm through a descriptor
// kept open: the pool reads a worker's after every call, and a read at
// offset 0 has the kernel write it afresh, where os.ReadFile opens, stats,
// reads and closes it each time (~50 us of pyrun's CPU per call, a tenth of
// a warm call's). The descriptor stays bound to the process it was opened
// for: once that is reaped, reads fail instead of finding a new owner of
// its PID. Safe for concurrent use.
type statmFile struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

// resident is the process's resident set size. Without a descriptor (none
// to spare) it reads the file by name.
func (s *statmFile) resident(pid int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, os.ErrClosed
	}
	if s.f == nil {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/statm")
		if err != nil {
			return residentBytes(pid)
		}
		s.f = f
	}
	var buf [128]byte
	n, err := s.f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return parseStatm(pid, buf[:n])
}

// close releases the descriptor; resident fails from then on.
func (s *statmFile) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// procStat is a process's CPU time, user and system, and its number of
// threads, from /proc/<pid>/stat (CPU time in clock ticks of 10ms, Linux's
// fixed USER_HZ).
func procStat(pid int) (used time.Duration, threads int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15,
	// num_threads field 20.
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if i < 0 || len(f) < 18 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	var n [3]int64
	for k, s := range [][]byte{f[11], f[12], f[17]} {
		if n[k], err = strconv.ParseInt(string(s), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("unexpected /proc/%d/stat: %w", pid, err)
		}
	}
	return time.Duration(n[0]+n[1]) * 10 * time.Millisecond, int(n[2]), nil
}

// engineCPU is the CPU time, user and system, that process pid's V8
// threads have used: V8's platform workers ("V8 DefaultWorker"), which
// compile (webR's R.wasm tiers up for some 14 s of a CPU after a worker is
// ready, and again for code a call made hot) and collect garbage for the
// threads that run code, and never run code themselves. The idle CPU checks
// take it off the process's: it is the engine's work, not code a call left
// running. Threads V8 starts live as long as the process, so what they used
// never leaves the sum while the process's own total keeps it.
func engineCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || !bytes.HasPrefix(b[open+1:end], []byte("V8 ")) {
			continue
		}
		f := bytes.Fields(b[end+1:])
		if len(f) < 13 {
			return 0, fmt.Errorf("unexpected %s%s/stat", dir, t.Name())
		}
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(string(s), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("unexpected %s%s/stat: %w", dir, t.Name(), err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// unreadBytes is how many bytes written to a pipe its reader has not taken
// yet; f may be the pipe's write end.
func unreadBytes(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

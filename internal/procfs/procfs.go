// Package procfs reads what the tests and scripts/ measure about a process
// from Linux's /proc: its memory sizes and its children. Off Linux every
// read fails with an error (Children finds none).
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Size reads a field "Name:   123 kB" of a /proc file (/proc/meminfo,
// /proc/<pid>/smaps_rollup), in bytes: Size("/proc/meminfo", "MemTotal").
func Size(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kib, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s in %s: %w", field, path, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}

// Status reads a size field of /proc/<pid>/status ("VmRSS", "VmHWM"), in
// bytes.
func Status(pid int, field string) (int64, error) {
	return Size(Path(pid, "status"), field)
}

// Path is the path of a process's file in /proc: Path(pid, "smaps_rollup").
func Path(pid int, file string) string {
	return filepath.Join("/proc", strconv.Itoa(pid), file)
}

// Children lists the processes whose parent is pid.
func Children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := []byte(strconv.Itoa(pid))
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := bytes.Fields(b[i+1:]); len(f) > 1 && bytes.Equal(f[1], parent) {
			kids = append(kids, child)
		}
	}
	return kids
}

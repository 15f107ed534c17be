//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// threads of one process, read from /proc/PID/task/*/schedstat: the time
// each has run on a CPU and waited for one, in nanoseconds. Unlike wall
// time, a thread's run time is not stretched by other processes taking the
// cores, so on a shared machine it tells work from waiting.
type threads struct {
	pid int
	// call is the thread that runs Python (Deno names a Worker's thread
	// after the Worker's name; pyrun's is "worker-N"); 0 if not found.
	call int
}

// schedTimes is one reading: run and wait time of the call thread, and
// the run time of all the process's other threads (V8's compile and
// collector threads, Deno's I/O threads, the idle main thread).
type schedTimes struct {
	callRun, callWait, otherRun time.Duration
}

// oldestChild is the first started of this process's children named comm.
func oldestChild(comm string) (int, error) {
	self := strconv.Itoa(os.Getpid())
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	found, foundStart := 0, int64(-1)
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		// After the command: state ppid ... starttime (field 22 of the
		// whole line, 20th after the command), in clock ticks since boot.
		f := strings.Fields(s[closing+1:])
		if len(f) < 20 || f[1] != self || s[open+1:closing] != comm {
			continue
		}
		start, err := strconv.ParseInt(f[19], 10, 64)
		if err != nil {
			continue
		}
		if foundStart < 0 || start < foundStart {
			found, _ = strconv.Atoi(filepath.Base(filepath.Dir(d)))
			foundStart = start
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("no %s child", comm)
	}
	return found, nil
}

// workerThreads finds a worker process's threads and its call thread.
func workerThreads(pid int) (*threads, error) {
	t := &threads{pid: pid}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
	if err != nil {
		return nil, err
	}
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join(task, "comm"))
		if err == nil && strings.HasPrefix(string(comm), "worker-") {
			t.call, _ = strconv.Atoi(filepath.Base(task))
		}
	}
	if t.call == 0 {
		return nil, fmt.Errorf("process %d has no worker-N thread", pid)
	}
	return t, nil
}

// read takes one reading of all the threads.
func (t *threads) read() (schedTimes, error) {
	var st schedTimes
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", t.pid))
	if err != nil {
		return st, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(task, "schedstat"))
		if err != nil {
			continue // a thread that ended: its time is lost, rarely
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return st, fmt.Errorf("short %s/schedstat", task)
		}
		run, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return st, fmt.Errorf("bad %s/schedstat: %q", task, b)
		}
		if filepath.Base(task) == strconv.Itoa(t.call) {
			st.callRun, st.callWait = time.Duration(run), time.Duration(wait)
		} else {
			st.otherRun += time.Duration(run)
		}
	}
	return st, nil
}

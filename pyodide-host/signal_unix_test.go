//go:build !windows

package pyodidehost_test

import "syscall"

// interruptSignal is what the supervisor sends a worker to interrupt its
// call (supervisor/proc_unix.go).
var interruptSignal = syscall.SIGUSR2

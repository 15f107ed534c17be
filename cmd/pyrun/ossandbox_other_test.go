//go:build !linux

package main

import (
	"fmt"
	"os"
)

// envConfine: see ossandbox_test.go. The OS sandbox and the confinement
// its tests apply (seccomp, no_new_privs, user namespaces) are Linux's.
const envConfine = "PYRUN_TEST_CONFINE"

func confineAndExec(string) int {
	fmt.Fprintln(os.Stderr, "confinement needs Linux (seccomp)")
	return 2
}

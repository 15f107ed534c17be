//go:build !windows

package supervisor

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcAttr puts a worker in its own process group, so that a terminal's
// Ctrl-C reaches pyrun (which stops workers in order) and not the workers
// directly, and, where the OS can, has the kernel kill it if pyrun dies
// without cleaning up (setDeathSignal). The OS sandbox may have set other
// fields (oswall.Wrap).
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setDeathSignal(cmd.SysProcAttr)
}

// interruptSignal is what asks a worker's running call to stop: the
// worker's main thread turns SIGUSR2 into KeyboardInterrupt (Python) or
// webR.interrupt() (R).
var interruptSignal os.Signal = syscall.SIGUSR2

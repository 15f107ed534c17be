//go:build !linux

package supervisor

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts a worker in its own process group, so that a terminal's
// Ctrl-C reaches pyrun (which stops workers in order) and not the workers.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

package supervisor

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcAttr gives a worker a process group of its own, so that a
// console's Ctrl-C reaches pyrun (which stops workers in order) and not
// the workers directly. Windows has no parent-death signal.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP
}

// interruptSignal: Windows delivers no signal but a kill to another
// process (os.Process.Signal refuses os.Interrupt there), so an
// interrupt fails and the worker is killed, as when an interrupt is not
// honoured on Linux: the call ends by its time limit, the worker is
// replaced (docs/operations.md says what runs where).
var interruptSignal os.Signal = os.Interrupt

package supervisor

import "syscall"

// setDeathSignal has the kernel kill the worker when pyrun dies.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

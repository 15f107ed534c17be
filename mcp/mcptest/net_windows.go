package mcptest

import "syscall"

func setReceiveBuffer(fd uintptr, n int) {
	_ = syscall.SetsockoptInt(syscall.Handle(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}

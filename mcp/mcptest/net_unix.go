//go:build !windows

package mcptest

import "syscall"

func setReceiveBuffer(fd uintptr, n int) {
	_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}

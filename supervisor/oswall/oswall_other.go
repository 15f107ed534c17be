//go:build !linux

package oswall

import (
	"errors"
	"os/exec"
	"runtime"
)

// selfExe: no launcher exists off Linux (Probe says every layer is
// missing, so Plan never asks Wrap for one).
const selfExe = ""

var errNotLinux = errors.New("the OS sandbox is built on Linux's seccomp, Landlock and namespaces; this is " + runtime.GOOS)

// Probe says which layers this machine offers: none off Linux.
func Probe() Support {
	s := Support{Missing: map[Layer]string{}}
	for _, l := range Layers {
		s.Missing[l] = errNotLinux.Error()
	}
	return s
}

// ProgramNeeds is for Landlock rules, which exist only on Linux.
func ProgramNeeds(string) (exec, read []string, err error) { return nil, nil, errNotLinux }

func wrapProcAttr(*exec.Cmd, Policy) error { return errNotLinux }

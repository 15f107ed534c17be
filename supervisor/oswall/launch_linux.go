package oswall

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExe is the running program, whatever became of its file: the
// kernel's link to it works even after an upgrade replaced it on disk.
const selfExe = "/proc/self/exe"

// init turns the process into a launcher when it was started as one. It
// runs before the program's packages that do not depend on this one have
// started up (Go initialises packages in dependency order, then by import
// path: in pyrun, about 100 of its 146), so a launch costs less than a
// start of pyrun would (13 ms against 19 ms on an idle 2-core machine), and
// every program that imports this package, test binaries included, is a
// launcher without a hook of its own in main.
func init() {
	if len(os.Args) == 0 || os.Args[0] != launcherName {
		return
	}
	spec, ok := os.LookupEnv(envPolicy)
	if !ok {
		return
	}
	os.Exit(runLauncher(spec))
}

// runLauncher applies the layers of spec (a JSON launch) and execs its
// program; it returns only on failure, with the exit status.
func runLauncher(spec string) int {
	// prctl, landlock_restrict_self and execve act on the calling thread
	// (seccomp too, without TSYNC): all on this one, and the program
	// inherits what it has.
	runtime.LockOSThread()
	var l launch
	if err := json.Unmarshal([]byte(spec), &l); err != nil {
		fmt.Fprintf(os.Stderr, "pyrun os sandbox: bad launch: %v\n", err)
		return exitLaunch
	}
	if l.Probe {
		b, _ := json.Marshal(applyAll(l))
		os.Stdout.Write(append(b, '\n'))
		return 0
	}
	for layer, err := range applyAll(l) {
		if err != "" {
			fmt.Fprintf(os.Stderr, "pyrun os sandbox: %s: %s; the worker did not start\n", layer, err)
			return exitLaunch
		}
	}
	err := syscall.Exec(l.Path, l.Args, l.Env)
	fmt.Fprintf(os.Stderr, "pyrun os sandbox: exec %s: %v\n", l.Path, err)
	return exitLaunch
}

// applyAll applies l's layers in order, and says for each whether it
// took ("" ) or why not. A layer that fails is reported and the next ones
// are still tried (a probe wants to know them all).
func applyAll(l launch) map[Layer]string {
	out := map[Layer]string{}
	report := func(layer Layer, err error) {
		out[layer] = ""
		if err != nil {
			out[layer] = err.Error()
		}
	}
	if l.Layers.Base {
		report(LayerRlimits, setRlimits(l.Policy))
		report(LayerNoNewPrivs, dropPrivileges())
	}
	if (l.Layers.Landlock || l.Layers.Seccomp) && !l.Layers.Base {
		// Both need it (or a privilege a worker must not have).
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			report(LayerNoNewPrivs, err)
		}
	}
	if l.Layers.Landlock {
		report(LayerLandlock, restrictLandlock(l.Policy))
	}
	if l.Layers.Seccomp {
		report(LayerSeccomp, loadSeccomp(l.Policy))
	}
	if l.Layers.NetNS && !l.Network {
		report(LayerNetNS, checkNetNS())
	}
	return out
}

// setRlimits sets the resource limits, soft and hard alike (a process may
// lower its hard limit, never raise it again; Deno raises its soft open
// files limit to the hard one at start). unix.Setrlimit goes through
// syscall.Setrlimit, which also tells Go's syscall.Exec not to put back
// the open files limit the launcher started with (a privileged launcher
// could, undoing this one; TestWall checks it).
func setRlimits(p Policy) error {
	files, size := p.OpenFiles, p.FileSize
	if files == 0 {
		files = DefaultOpenFiles
	}
	if size == 0 {
		size = DefaultFileSize
	}
	for _, r := range []struct {
		name     string
		resource int
		value    uint64
	}{
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0}, // a core dump would hold the worker's memory: other calls' data
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, size},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, files},
	} {
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.resource, &cur); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		// Never above what it already had: raising a hard limit takes a
		// capability the launcher need not have.
		v := min(r.value, cur.Max)
		if err := unix.Setrlimit(r.resource, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	// A write past RLIMIT_FSIZE then fails with EFBIG, which the code sees
	// as an error, instead of killing the worker. An ignored signal stays
	// ignored across execve.
	signal.Ignore(syscall.SIGXFSZ)
	return nil
}

// dropPrivileges makes sure the program gets no capabilities through
// execve, not even as root, and sets no_new_privs (so that no setuid or
// file-capability binary gives it any either). After execve a process
// has (inheritable & the file's inheritable) | (the file's permitted &
// bounding) | ambient, a root process's file sets counting as full: so
// the bounding set is emptied (which takes CAP_SETPCAP: a launcher
// without it and not root gains nothing from it anyway), the ambient and
// inheritable sets cleared. capset is called only when there is
// something to clear: a filter may refuse the call itself (systemd's
// ~@privileged).
func dropPrivileges() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			if !errors.Is(err, unix.EPERM) {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	if data[0].Inheritable != 0 || data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("clear inheritable capabilities: %w", err)
		}
	}
	if unix.Geteuid() == 0 {
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 1 {
				return fmt.Errorf("root without CAP_SETPCAP cannot drop capability %d, which the worker would get", c)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// checkNetNS confirms the launcher is not in its parent's network
// namespace: Wrap asked the fork for a new one.
func checkNetNS() error {
	mine, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", os.Getppid()))
	if err != nil {
		// The parent's namespace is not ours to read (another user
		// namespace may hide it): the fork's flags made a new one.
		return nil
	}
	if mine == parent {
		return errors.New("still in the parent's network namespace")
	}
	return nil
}

// wrapProcAttr asks the fork for an empty network namespace when p may
// reach no network: a new user namespace (so that no privilege is
// needed), mapping only pyrun's own user and group, and a network
// namespace in it with nothing but a loopback interface that is down.
func wrapProcAttr(cmd *exec.Cmd, p Policy) error {
	if !p.Layers.NetNS || p.Network {
		return nil
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	a.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
	uid, gid := os.Getuid(), os.Getgid()
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	a.GidMappingsEnableSetgroups = false
	return nil
}

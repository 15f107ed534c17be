package oswall

import (
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list: Deno and V8 use a wide and changing
// set of system calls, and an allow list that misses one kills a worker in
// a way no test may catch. What it refuses gets EPERM (ENOSYS for clone3,
// so that the C library falls back to clone, whose flags the filter can
// see); nothing is killed.
//
// Refused, besides docs/contract.md section 15's list:
//   - new processes: fork, vfork, and clone without CLONE_THREAD (threads
//     are clone with CLONE_THREAD). A worker that could fork could leave a
//     process behind that pyrun does not supervise.
//   - sockets of any family without Policy.Network; with it, of families
//     other than IPv4 and IPv6: no UNIX-domain sockets, so no daemon's
//     socket on the host (Docker's, D-Bus) is reachable, which Landlock of
//     ABI < 9 cannot stop; no netlink, no packet sockets; and no MPTCP
//     trick around Landlock's TCP rules without the network.
//   - mode changes that add a setuid, setgid, sticky or write-for-others
//     bit (chmod, fchmod, fchmodat, fchmodat2), and owner changes (chown,
//     fchown, lchown, fchownat): Deno checks no permission for a mode or
//     owner change on a file opened for reading, so a worker's code could
//     otherwise make a readable host file (a --mount, its own runtime)
//     setuid or world-writable, a risk for the host. Plain mode changes
//     (0644, 0755) stay: Pyodide and webR make them.
//   - io_uring (a large kernel surface that seccomp cannot see into), the
//     new mount API, NUMA memory policy, kcmp, pidfd_getfd and
//     process_madvise (reach into other processes), and the calls of
//     systemd's @privileged, @module, @reboot, @swap, @clock, @raw-io and
//     @obsolete sets that a worker never makes.
//
// Calls of any architecture other than the native one are refused
// (an x86-64 process can make i386 calls through int 0x80, which a filter
// for x86-64 numbers would let through); go-seccomp-bpf refuses the x32
// ABI itself.
var deniedCalls = []string{
	// docs/contract.md section 15
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "unshare",
	"setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "chroot",
	// new processes (clone: below)
	"fork", "vfork",
	// other processes, other file systems, the kernel
	"kcmp", "pidfd_getfd", "process_madvise", "name_to_handle_at",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	"mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy", "move_pages", "migrate_pages",
	"acct", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname", "syslog", "vhangup", "iopl", "ioperm", "modify_ldt", "uselib",
	"quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "_sysctl", "sysfs", "ustat",
	"create_module", "get_kernel_syms", "query_module", "fanotify_init",
}

// riskyModeBits are the mode bits a worker may not add to a file:
// setuid, setgid, sticky and write for others.
const riskyModeBits = unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX | unix.S_IWOTH

// modeCalls name the mode-changing system calls and the argument that holds
// the mode.
var modeCalls = map[string]int{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}

// ownerCalls change a file's owner or group; a worker never needs to.
var ownerCalls = []string{"chown", "fchown", "lchown", "fchownat"}

// namespaceFlags are clone's flags that make new namespaces (CLONE_NEWTIME
// shares its bit with the exit signal in clone, and exists only in clone3
// and unshare, both refused).
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// policyFilter is the seccomp policy of p.
func policyFilter(p Policy, native *arch.Info) seccomp.Policy {
	var deny []string
	for _, name := range append(deniedCalls, ownerCalls...) {
		if _, ok := native.SyscallNames[name]; ok { // fork, vfork, chmod and chown are not on arm64
			deny = append(deny, name)
		}
	}
	conditional := []seccomp.NameWithConditions{
		// clone making namespaces, and clone making a process.
		{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}},
		{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}}},
		// personality changes (ADDR_NO_RANDOMIZE and the like); a query
		// (0xffffffff) and PER_LINUX are fine.
		{Name: "personality", Conditions: []seccomp.Condition{
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0},
			{Argument: 0, Operation: seccomp.NotEqual, Value: 0xffffffff},
		}},
	}
	for name, arg := range modeCalls {
		if _, ok := native.SyscallNames[name]; ok {
			conditional = append(conditional, seccomp.NameWithConditions{Name: name, Conditions: []seccomp.Condition{
				{Argument: uint32(arg), Operation: seccomp.BitsSet, Value: riskyModeBits},
			}})
		}
	}
	if p.Network {
		conditional = append(conditional, seccomp.NameWithConditions{Name: "socket", Conditions: []seccomp.Condition{
			{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
			{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6},
		}})
	} else {
		deny = append(deny, "socket")
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: deny, NamesWithCondtions: conditional},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
}

// loadSeccomp installs p's filter on the calling thread (no_new_privs is
// set already: applyAll).
func loadSeccomp(p Policy) error {
	native, err := arch.GetInfo("")
	if err != nil {
		return err
	}
	pol := policyFilter(p, native)
	prog, err := pol.Assemble()
	if err != nil {
		return fmt.Errorf("assemble the filter: %w", err)
	}
	// Calls of another architecture: EPERM, before the library's filter
	// (which would let them through to its default action).
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)},
	}
	raw, err := bpf.Assemble(append(guard, prog...))
	if err != nil {
		return fmt.Errorf("assemble the filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if e == unix.EPERM || e == unix.ENOSYS || e == unix.EACCES {
		// The older way in: systemd's @system-service set, for one,
		// has prctl but not seccomp (systemd 252).
		if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
			return fmt.Errorf("load the filter (seccomp: %v; prctl): %w", e, err)
		}
		return nil
	}
	if e != 0 {
		return fmt.Errorf("load the filter: %w", e)
	}
	return nil
}

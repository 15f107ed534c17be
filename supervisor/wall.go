package supervisor

import (
	"fmt"
	"os/exec"
	"slices"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// The second wall (docs/contract.md section 15): every Deno process pyrun starts, workers of
// every engine and the snapshot maker alike, starts behind the OS sandbox
// of package oswall, whose rules mirror the process's Deno permissions
// (denoLaunch's grants) and add only what Deno itself needs to run:
//
//   - read: the runtime folder (Deno's module loader reads the program's
//     static imports without a permission; it holds npm's public packages
//     and pyrun's worker program), the grants' files (the snapshot, the
//     package cache, the mounts), Deno's cache, the empty working folder,
//     the shared libraries and loader Deno links, a few files of the
//     system that say nothing of its users (time zones, CPU and memory
//     sizes, /dev/urandom), and for a worker with network the resolver's
//     files in /etc. Nothing else: no home folder, no /etc/passwd, no
//     other process's /proc.
//   - write: the :rw mounts and /dev/null. Deno's cache only for the
//     snapshot maker and the cache primer, which run no code of a call
//     (cacheprime.go); workers read it.
//   - execute: the Deno binary and its loader.
//   - network: as the grants say; otherwise no socket, no TCP, an empty
//     network namespace. No TCP bind either way.

// workerCmd makes cmd (a command of rt.Deno, made by exec.Command or
// exec.CommandContext) the process of a worker of e, or with
// l.makeSnapshot the snapshot maker: denoLaunch's flags, workerEnv's
// environment, pyrun's working folder, behind the layers of the OS
// sandbox that c.OSSandbox asks for.
func workerCmd(cmd *exec.Cmd, rt *Runtime, e Engine, c Config, l launch) error {
	args, g, err := denoLaunch(rt, e, c, l)
	if err != nil {
		return err
	}
	cmd.Args = append([]string{rt.Deno}, args...)
	cmd.Env, cmd.Dir = workerEnv(rt), rt.WorkDir
	layers, err := wallLayers(c)
	if err != nil {
		return err
	}
	if layers == (oswall.Set{}) {
		return nil
	}
	p, err := wallPolicy(rt, g, c, l)
	if err != nil {
		return fmt.Errorf("OS sandbox: %w", err)
	}
	p.Layers = layers
	return oswall.Wrap(cmd, p)
}

// wallLayers are the layers of the OS sandbox workers of c start behind:
// those c.OSSandbox asks for, of those this machine offers.
func wallLayers(c Config) (oswall.Set, error) {
	return oswall.Plan(c.OSSandbox, oswall.Probe())
}

// systemReads are the system's files any Deno process reads, none of which
// tells anything of the host's users or other processes: the C library's
// and V8's sizing of the machine, random numbers, the local time zone.
// (Deno also looks at /sys/fs/cgroup for a CPU quota, and at the user's
// home folder for an .npmrc: refused, it goes on without them.)
var systemReads = []string{
	"/dev/urandom", "/dev/random",
	"/proc/meminfo", "/proc/cpuinfo", "/proc/sys/vm/overcommit_memory",
	"/sys/devices/system/cpu",
	"/etc/localtime", "/usr/share/zoneinfo",
}

// resolverReads are what the C library's resolver reads to look up a
// host name, for workers with network.
var resolverReads = []string{
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols",
}

// wallPolicy is the OS sandbox's policy for a Deno process of rt started
// as l whose flags grant g (see the top of this file).
func wallPolicy(rt *Runtime, g grants, c Config, l launch) (oswall.Policy, error) {
	execs, libs, err := oswall.ProgramNeeds(rt.Deno)
	if err != nil {
		return oswall.Policy{}, err
	}
	read := slices.Concat([]string{rt.Dir, rt.WorkDir}, g.read, libs, systemReads)
	if g.network {
		read = append(read, resolverReads...)
	}
	write := slices.Concat(g.write, []string{"/dev/null"})
	if l.makeSnapshot || l.primeCache {
		write = append(write, rt.DenoDir)
	} else {
		read = append(read, rt.DenoDir)
	}
	return oswall.Policy{
		Read:      read,
		Write:     write,
		Exec:      execs,
		Network:   g.network,
		OpenFiles: uint64(c.WorkerOpenFiles),
		FileSize:  uint64(c.WorkerFileSize),
	}, nil
}

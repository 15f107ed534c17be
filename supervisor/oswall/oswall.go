// Package oswall is pyrun's second wall: an OS sandbox around each worker
// process, below Deno's own permission checks (the first wall), so that a
// bug in Deno, V8 or Pyodide that breaks the first still leaves the code
// with nothing it was not meant to have.
//
// Go cannot run code between fork and exec, so a sandboxed process starts
// as a copy of the running program (/proc/self/exe) under a marker name.
// This package's init function notices the marker before the program's
// other packages start up, applies the layers to itself (resource limits,
// no capabilities, no_new_privs, Landlock, seccomp) and execs the real
// program, which keeps its process id and inherits every layer. An empty
// network namespace, when the process may reach no network, comes from
// the fork itself (a new user and network namespace). Every program that
// imports this package, pyrun and its test binaries alike, can therefore
// launch sandboxed processes. Use:
//
//	cmd := exec.Command(deno, args...)
//	if err := oswall.Wrap(cmd, oswall.Policy{Read: ..., Exec: ..., Layers: layers}); err != nil { ... }
//	cmd.Start() // Deno, sandboxed, under its own process id
//
// Probe says which layers this machine offers (a kernel may lack Landlock;
// a container's seccomp profile or systemd's RestrictNamespaces may forbid
// user namespaces); Plan turns a Mode and that into the layers to apply.
package oswall

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Mode is how much of the sandbox pyrun insists on (--os-sandbox).
type Mode string

const (
	// ModeAuto applies every layer the machine offers, and warns of each
	// one it does not.
	ModeAuto Mode = "auto"
	// ModeRequired refuses to start workers without seccomp and Landlock.
	ModeRequired Mode = "required"
	// ModeOff starts workers without the sandbox.
	ModeOff Mode = "off"
)

// ParseMode checks an --os-sandbox value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeRequired, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("os-sandbox must be auto, required or off, not %q", s)
}

// Layer is one layer of the sandbox.
type Layer string

const (
	// LayerNoNewPrivs: no_new_privs and no capabilities, so that no
	// executable can give the process more rights than it started with.
	LayerNoNewPrivs Layer = "no_new_privs"
	// LayerRlimits: no core dumps, a cap on the size of a file it writes
	// and on the files it holds open.
	LayerRlimits Layer = "rlimits"
	// LayerSeccomp: a filter of system calls (seccomp_linux.go).
	LayerSeccomp Layer = "seccomp"
	// LayerLandlock: the files it may read, write and execute, its TCP,
	// and the signals and abstract sockets it may reach outside itself.
	LayerLandlock Layer = "landlock"
	// LayerNetNS: an empty network namespace for a process that may reach
	// no network.
	LayerNetNS Layer = "netns"
)

// Layers lists every layer, in the order the launcher applies them.
var Layers = []Layer{LayerRlimits, LayerNoNewPrivs, LayerLandlock, LayerSeccomp, LayerNetNS}

// ErrRequired means ModeRequired and a layer it insists on is missing.
var ErrRequired = errors.New("the OS sandbox is required (--os-sandbox required) and this machine does not offer it")

// Support is what this machine offers, as Probe found it.
type Support struct {
	// Missing holds each layer that cannot be had, with the reason.
	Missing map[Layer]string
	// LandlockABI is the kernel's Landlock ABI version; 0: none.
	LandlockABI int
}

// Has says whether l can be had.
func (s Support) Has(l Layer) bool {
	_, missing := s.Missing[l]
	return !missing
}

// Set is a set of layers to apply.
type Set struct {
	// Base: resource limits, no capabilities and no_new_privs.
	Base     bool `json:"base,omitempty"`
	Seccomp  bool `json:"seccomp,omitempty"`
	Landlock bool `json:"landlock,omitempty"`
	NetNS    bool `json:"netns,omitempty"`
}

// Names lists the layers in s.
func (s Set) Names() []Layer {
	var out []Layer
	for _, l := range Layers {
		if s.has(l) {
			out = append(out, l)
		}
	}
	return out
}

func (s Set) has(l Layer) bool {
	switch l {
	case LayerNoNewPrivs, LayerRlimits:
		return s.Base
	case LayerSeccomp:
		return s.Seccomp
	case LayerLandlock:
		return s.Landlock
	case LayerNetNS:
		return s.NetNS
	}
	return false
}

// Plan is the set of layers mode asks for on a machine that offers s:
// none for ModeOff; every one offered for ModeAuto; for ModeRequired the
// same, or ErrRequired when seccomp or Landlock is missing.
func Plan(mode Mode, s Support) (Set, error) {
	if mode == ModeOff {
		return Set{}, nil
	}
	if mode == ModeRequired {
		var why []string
		for _, l := range []Layer{LayerNoNewPrivs, LayerSeccomp, LayerLandlock} {
			if !s.Has(l) {
				why = append(why, fmt.Sprintf("%s: %s", l, s.Missing[l]))
			}
		}
		if len(why) > 0 {
			return Set{}, fmt.Errorf("%w: %s", ErrRequired, strings.Join(why, "; "))
		}
	} else if mode != ModeAuto && mode != "" {
		return Set{}, fmt.Errorf("unknown os-sandbox mode %q", mode)
	}
	return Set{
		Base:     s.Has(LayerNoNewPrivs) && s.Has(LayerRlimits),
		Seccomp:  s.Has(LayerSeccomp),
		Landlock: s.Has(LayerLandlock),
		NetNS:    s.Has(LayerNetNS),
	}, nil
}

// Status is the sandbox in force under a mode on a machine: what pyrun
// warmup prints, /healthz's os_sandbox and the pyrun_os_sandbox_layer
// metric say.
type Status struct {
	Mode Mode `json:"mode"`
	// Layers are the layers in force, in the order they are applied.
	Layers []Layer `json:"layers"`
	// Missing are the layers mode asks for that the machine does not
	// offer, with why (none under ModeOff, which asks for none).
	Missing map[Layer]string `json:"missing,omitempty"`
	// LandlockABI is the Landlock ABI version in force; 0: none.
	LandlockABI int `json:"landlock_abi,omitempty"`
}

// Describe is the status of mode on a machine that offers s. Under
// ModeRequired with a layer missing, no worker starts: the status says
// what is missing.
func Describe(mode Mode, s Support) Status {
	if mode == "" {
		mode = ModeAuto
	}
	st := Status{Mode: mode, Layers: []Layer{}}
	if mode == ModeOff {
		return st
	}
	set, err := Plan(mode, s)
	if err == nil {
		st.Layers = set.Names()
	}
	for _, l := range Layers {
		if !s.Has(l) {
			if st.Missing == nil {
				st.Missing = map[Layer]string{}
			}
			st.Missing[l] = s.Missing[l]
		}
	}
	if err == nil && set.Landlock {
		st.LandlockABI = s.LandlockABI
	}
	return st
}

// Policy is what one sandboxed process may do. The zero value of each
// field is the narrowest.
type Policy struct {
	// Read are the files and folders (with everything beneath) it may
	// read. Paths that do not exist are left out.
	Read []string `json:"read,omitempty"`
	// Write are the folders it may change (write, truncate, make, remove
	// and rename files and folders beneath) and files it may write
	// (/dev/null); it may read them too.
	Write []string `json:"write,omitempty"`
	// Exec are the files it may execute: its own binary and the dynamic
	// loader (a process replaces itself with its program through execve).
	Exec []string `json:"exec,omitempty"`
	// Network lets it open IPv4 and IPv6 sockets and connect over TCP.
	// Without it, it may open no socket of any family, connect nowhere
	// over TCP, and lives in an empty network namespace.
	Network bool `json:"network,omitempty"`
	// OpenFiles caps its open files (RLIMIT_NOFILE). 0: DefaultOpenFiles.
	OpenFiles uint64 `json:"open_files,omitempty"`
	// FileSize caps, in bytes, the size of a file it writes
	// (RLIMIT_FSIZE): a write past it fails with EFBIG (SIGXFSZ is
	// ignored). 0: DefaultFileSize.
	FileSize uint64 `json:"file_size,omitempty"`
	// Layers are the layers to apply. Each must be in force before the
	// program runs: the launcher fails rather than run it with less.
	Layers Set `json:"layers"`
}

// Defaults of the resource limits.
const (
	// DefaultOpenFiles: a Python worker holds about 30 files open (Deno's
	// own, V8's, its pipes); the rest is for files of mounts a call opens.
	DefaultOpenFiles = 1024
	// DefaultFileSize: the largest file a worker may write (only :rw
	// mounts are writable).
	DefaultFileSize = 1 << 30
)

// launch is what the launcher receives: the policy and the program.
type launch struct {
	Policy
	// Path, Args and Env are the program to run: its path, its whole argv
	// and its whole environment.
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// Probe: apply the layers, report on stdout which took (a JSON object
	// of layer to error, "" for success) and exit instead of running a
	// program.
	Probe bool `json:"probe,omitempty"`
}

const (
	// launcherName is argv[0] of a launcher: with envPolicy, what makes the
	// program one.
	launcherName = "pyrun-oswall"
	// envPolicy carries the launch to the launcher, which removes it.
	envPolicy = "PYRUN_OSWALL"
	// exitLaunch is the launcher's status when it cannot apply a layer or
	// run the program: the program never ran.
	exitLaunch = 126
)

// Wrap makes cmd start its program behind the layers of p: it becomes a
// launcher (a copy of the running program) that applies them and then
// execs cmd's program, with cmd's arguments, environment and working
// directory, under the same process id. Layers with nothing to apply
// leave cmd as it is. It may set cmd.SysProcAttr (Cloneflags, UID and GID
// maps): set other fields of it afterwards without replacing it.
func Wrap(cmd *exec.Cmd, p Policy) error {
	if p.Layers == (Set{}) {
		return nil
	}
	if cmd.Process != nil {
		return errors.New("oswall: command already started")
	}
	if cmd.Err != nil {
		return cmd.Err
	}
	l := launch{Policy: p, Path: cmd.Path, Args: slices.Clone(cmd.Args), Env: cmd.Env}
	if l.Env == nil {
		l.Env = []string{} // a nil Env would have meant pyrun's own
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("oswall: %w", err)
	}
	cmd.Path = selfExe
	cmd.Args = []string{launcherName}
	cmd.Env = []string{envPolicy + "=" + string(b)}
	return wrapProcAttr(cmd, p)
}

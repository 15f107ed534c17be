package oswall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the sandboxed program: with envTry set it
// tries what the sandbox should refuse and prints what each attempt gave.
const envTry = "OSWALL_TEST_TRY"

func TestMain(m *testing.M) {
	if spec := os.Getenv(envTry); spec != "" {
		var t tries
		if err := json.Unmarshal([]byte(spec), &t); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		b, _ := json.Marshal(t.run())
		os.Stdout.Write(b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tries are the attempts the sandboxed test binary makes.
type tries struct {
	Read, Write, Connect string
	Ptrace               int
	// Mode is a file whose mode and owner the program tries to change.
	Mode string
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func (t tries) run() map[string]string {
	out := map[string]string{}
	_, err := os.ReadFile(t.Read)
	out["read"] = errString(err)
	out["write"] = errString(os.WriteFile(t.Write, []byte("x"), 0o644))
	c, err := net.Dial("tcp", t.Connect)
	if err == nil {
		c.Close()
	}
	out["connect"] = errString(err)
	_, err = syscall.ForkExec("/bin/true", []string{"true"}, nil)
	out["fork"] = errString(err)
	_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(t.Ptrace), 0)
	if e == 0 {
		unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(t.Ptrace), 0)
	}
	out["ptrace"] = errString(errnoErr(e))
	out["unshare"] = errString(unix.Unshare(unix.CLONE_NEWUTS))
	_, _, e = unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	out["clone3"] = errString(errnoErr(e))
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	out["unix socket"] = errString(err)
	out["kill parent"] = errString(unix.Kill(os.Getppid(), 0))
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		out["status"] = err.Error()
	}
	for _, line := range strings.Split(string(status), "\n") {
		for _, k := range []string{"NoNewPrivs", "Seccomp", "CapEff", "CapBnd"} {
			if v, ok := strings.CutPrefix(line, k+":"); ok {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	out["chmod plain"] = errString(unix.Chmod(t.Mode, 0o640))
	out["chmod setuid"] = errString(unix.Chmod(t.Mode, 0o4755))
	out["chmod o+w"] = errString(unix.Chmod(t.Mode, 0o666))
	out["fchmodat sticky"] = errString(unix.Fchmodat(unix.AT_FDCWD, t.Mode, 0o1755, 0))
	if fd, err := unix.Open(t.Mode, unix.O_RDONLY, 0); err != nil {
		out["fchmod setgid"], out["fchown"] = errString(err), errString(err)
	} else {
		out["fchmod setgid"] = errString(unix.Fchmod(fd, 0o2755))
		out["fchown"] = errString(unix.Fchown(fd, -1, os.Getgid()))
		unix.Close(fd)
	}
	out["netns"], _ = os.Readlink("/proc/self/ns/net")
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	out["nofile"] = fmt.Sprint(lim.Cur, "/", lim.Max)
	unix.Getrlimit(unix.RLIMIT_CORE, &lim)
	out["core"] = fmt.Sprint(lim.Max)
	return out
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// sandboxed runs the test binary's tries behind p (layers set in full
// when wall, none otherwise) and returns what each gave.
func sandboxed(t *testing.T, p Policy, try tries) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	execs, read, err := ProgramNeeds(exe)
	if err != nil {
		t.Fatal(err)
	}
	p.Exec = append(p.Exec, execs...)
	p.Read = append(p.Read, read...)
	p.Read = append(p.Read, "/dev/null")
	b, _ := json.Marshal(try)
	cmd := exec.Command(exe)
	cmd.Env = []string{envTry + "=" + string(b)}
	if err := Wrap(cmd, p); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	var res map[string]string
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%q: %v (stderr %s)", out, err, stderr.String())
	}
	return res
}

func TestProbe(t *testing.T) {
	s := Probe()
	t.Logf("%+v", s)
	// The machine pyrun is built and tested on offers every layer
	// (Landlock ABI 7, seccomp, user namespaces: docs/architecture.md, Facts).
	for _, l := range Layers {
		if !s.Has(l) {
			t.Errorf("%s is missing: %s", l, s.Missing[l])
		}
	}
	if s.LandlockABI < 6 {
		t.Errorf("Landlock ABI %d; this kernel has 7", s.LandlockABI)
	}
	set, err := Plan(ModeRequired, s)
	if err != nil || set != (Set{Base: true, Seccomp: true, Landlock: true, NetNS: true}) {
		t.Errorf("Plan(required) = %+v, %v", set, err)
	}
}

func TestPlan(t *testing.T) {
	none := Support{Missing: map[Layer]string{LayerSeccomp: "no", LayerNetNS: "no"}}
	if _, err := Plan(ModeRequired, none); !errors.Is(err, ErrRequired) || !strings.Contains(err.Error(), "seccomp: no") {
		t.Errorf("required without seccomp: %v", err)
	}
	if set, err := Plan(ModeAuto, none); err != nil || set != (Set{Base: true, Landlock: true}) {
		t.Errorf("auto = %+v, %v", set, err)
	}
	if set, err := Plan(ModeOff, Support{}); err != nil || set != (Set{}) {
		t.Errorf("off = %+v, %v", set, err)
	}
	none.LandlockABI = 5
	st := Describe(ModeAuto, none)
	if fmt.Sprint(st.Layers) != "[rlimits no_new_privs landlock]" || len(st.Missing) != 2 || st.LandlockABI != 5 {
		t.Errorf("Describe(auto) = %+v", st)
	}
	if st := Describe(ModeRequired, none); len(st.Layers) != 0 || st.Missing[LayerSeccomp] != "no" {
		t.Errorf("Describe(required) = %+v", st)
	}
	if st := Describe(ModeOff, none); len(st.Layers) != 0 || st.Missing != nil {
		t.Errorf("Describe(off) = %+v", st)
	}
}

// TestWall runs one program with and without the layers: the same
// attempts, refused with them, let through without (the control).
func TestWall(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	// A file the program may read: Deno checks no permission for fchmod on
	// one, so only the filter stands between the code and its mode.
	readable := t.TempDir()
	mode := filepath.Join(readable, "mode")
	if err := os.WriteFile(mode, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	try := tries{Read: secret, Write: filepath.Join(dir, "written"), Connect: ln.Addr().String(), Ptrace: target.Process.Pid, Mode: mode}
	own, _ := os.Readlink("/proc/self/ns/net")

	// A soft open files limit below the hard one, as most systems have:
	// Go's runtime raises its soft limit at start and syscall.Exec puts
	// back what it found, which for a launcher with privileges would undo
	// RLIMIT_NOFILE.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max > 2048 {
		low := unix.Rlimit{Cur: 2048, Max: lim.Max}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
			t.Fatal(err)
		}
		defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	all := Set{Base: true, Seccomp: true, Landlock: true, NetNS: true}
	walled := sandboxed(t, Policy{Layers: all, Read: []string{readable}}, try)
	t.Logf("walled: %v", walled)
	for k, want := range map[string]string{
		"read": "EACCES", "write": "EACCES", "fork": "EPERM", "ptrace": "EPERM", "unshare": "EPERM",
		"clone3": "ENOSYS", "unix socket": "EPERM", "kill parent": "EPERM",
		"chmod plain": "ok", "chmod setuid": "EPERM", "chmod o+w": "EPERM", "fchmodat sticky": "EPERM",
		"fchmod setgid": "EPERM", "fchown": "EPERM",
		"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000", "CapBnd": "0000000000000000",
		"nofile": "1024/1024", "core": "0",
	} {
		if walled[k] != want {
			t.Errorf("walled %s: %q, want %q", k, walled[k], want)
		}
	}
	if walled["connect"] == "ok" {
		t.Error("walled: connected to the test's loopback listener")
	}
	if walled["netns"] == own {
		t.Errorf("walled: in pyrun's network namespace %s", own)
	}

	// With the network, sockets of IPv4 and IPv6 are fine and TCP
	// connects; still no UNIX sockets.
	netted := sandboxed(t, Policy{Layers: all, Network: true}, try)
	if netted["connect"] != "ok" || netted["unix socket"] != "EPERM" || netted["netns"] != own || netted["nofile"] != "1024/1024" {
		t.Errorf("walled with network: %v", netted)
	}

	// The control: the same attempts with no layer all work.
	open := sandboxed(t, Policy{}, try)
	t.Logf("control: %v", open)
	for _, k := range []string{"read", "write", "connect", "fork", "ptrace", "unix socket", "kill parent",
		"chmod plain", "chmod setuid", "chmod o+w", "fchmodat sticky", "fchmod setgid", "fchown"} {
		if open[k] != "ok" {
			t.Errorf("control %s: %s, want ok", k, open[k])
		}
	}
	if open["NoNewPrivs"] != "0" || open["Seccomp"] != "0" {
		t.Errorf("control: %v", open)
	}
}

// TestProgramNeeds names what a dynamically linked program and a script
// need: the test binary runs behind every layer in TestWall; a shell
// script needs its shell too.
func TestProgramNeeds(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho from the script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	execs, read, err := ProgramNeeds(script)
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	if len(execs) < 3 || execs[0] != script || execs[1] != sh {
		t.Errorf("exec %q, want the script, %s and its loader", execs, sh)
	}
	cmd := exec.Command(script)
	if err := Wrap(cmd, Policy{Exec: execs, Read: read, Layers: Set{Base: true, Seccomp: true, Landlock: true}}); err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "from the script\n" {
		t.Errorf("the script behind the layers: %v %q", err, out)
	}
}

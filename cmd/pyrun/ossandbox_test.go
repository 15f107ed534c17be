//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// envConfine makes the test binary confine itself as a service manager or
// a container runtime would (confinement), then exec pyrun: see
// TestOSSandboxUnderConfinement.
const envConfine = "PYRUN_TEST_CONFINE"

// confinement is what confines pyrun: system calls refused with EPERM, as
// systemd's SystemCallFilter (with SystemCallErrorNumber=EPERM) and a
// container's seccomp profile refuse them, and no_new_privs.
type confinement struct {
	// Deny are system calls refused outright.
	Deny []string `json:"deny"`
	// DenyUserNS refuses new user namespaces, as systemd's
	// RestrictNamespaces=yes and Docker's and containerd's default
	// profiles (without CAP_SYS_ADMIN) do.
	DenyUserNS bool     `json:"deny_userns"`
	Argv       []string `json:"argv"`
}

// confineAndExec applies spec's confinement to the test binary and execs
// its argv; it returns only on failure.
func confineAndExec(spec string) int {
	var c confinement
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	groups := []seccomp.SyscallGroup{}
	if len(c.Deny) > 0 {
		groups = append(groups, seccomp.SyscallGroup{Action: seccomp.ActionErrno, Names: c.Deny})
	}
	if c.DenyUserNS {
		groups = append(groups, seccomp.SyscallGroup{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
			{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
			{Name: "unshare", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
		}})
	}
	err := seccomp.LoadFilter(seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy:     seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "confine:", err)
		return 2
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envConfine+"=") {
			env = append(env, kv)
		}
	}
	err = syscall.Exec(c.Argv[0], c.Argv, env)
	fmt.Fprintln(os.Stderr, "confine: exec:", err)
	return 2
}

// TestOSSandboxUnderConfinement runs pyrun confined as the hardening it is
// shipped with confines it, and as others might: --os-sandbox auto takes
// the layers that are left, warns of each one missing and runs calls;
// --os-sandbox required refuses to start without Landlock.
func TestOSSandboxUnderConfinement(t *testing.T) {
	needBinary(t)
	landlock := []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}
	for _, tc := range []struct {
		name     string
		c        confinement
		mode     string
		wantWarn []string // layers warned of as missing
		wantErr  string   // pyrun does not start, saying this
	}{{
		// systemd 252's @system-service lacks seccomp and landlock_*,
		// ~@privileged takes capset, RestrictNamespaces=yes user
		// namespaces: configs/pyrun.service without the lines it has for
		// pyrun's OS sandbox.
		name:     "systemd without pyrun's lines",
		c:        confinement{Deny: append([]string{"seccomp", "capset"}, landlock...), DenyUserNS: true},
		mode:     "auto",
		wantWarn: []string{"landlock", "netns"},
	}, {
		// configs/pyrun.service as shipped: ~@privileged takes capset,
		// and that is all pyrun's launcher would miss.
		name: "systemd as shipped",
		c:    confinement{Deny: []string{"capset"}},
		mode: "auto",
	}, {
		// Docker's and containerd's default seccomp profiles
		// (Kubernetes' RuntimeDefault) refuse new user namespaces to a
		// process without CAP_SYS_ADMIN, and allow the rest.
		name:     "a container's default seccomp profile",
		c:        confinement{DenyUserNS: true},
		mode:     "auto",
		wantWarn: []string{"netns"},
	}, {
		name:    "required without Landlock",
		c:       confinement{Deny: landlock},
		mode:    "required",
		wantErr: "landlock",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Argv = []string{pyrunBin, "run", "--workers", "1", "--os-sandbox", tc.mode, "-"}
			spec, _ := json.Marshal(tc.c)
			t.Setenv(envConfine, string(spec))
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			// pyrunCmd runs pyrunBin: run the test binary instead, which
			// confines itself and execs pyrun.
			saved := pyrunBin
			pyrunBin = exe
			stdout, stderr, code := pyrunCmd(t, "print('walled')")
			pyrunBin = saved
			if tc.wantErr != "" {
				if code != exitFail || !strings.Contains(stderr, "required") || !strings.Contains(stderr, tc.wantErr) {
					t.Errorf("exit %d, stderr:\n%s\nwant %d and an error naming %s", code, stderr, exitFail, tc.wantErr)
				}
				return
			}
			if code != 0 || !strings.Contains(stdout, "walled") {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			for _, l := range []string{"rlimits", "no_new_privs", "landlock", "seccomp", "netns"} {
				warned := strings.Contains(stderr, "layer="+l+" ")
				if want := strings.Contains(strings.Join(tc.wantWarn, " "), l); warned != want {
					t.Errorf("warned of %s missing: %v, want %v; stderr:\n%s", l, warned, want, stderr)
				}
			}
		})
	}
}

// TestSystemdUnitLetsTheSandboxIn checks the lines of configs/pyrun.service
// that TestOSSandboxUnderConfinement's "systemd as shipped" stands for:
// the OS sandbox's system calls allowed, and the two kinds of namespace
// its empty network namespace needs.
func TestSystemdUnitLetsTheSandboxIn(t *testing.T) {
	unit, err := os.ReadFile("../../configs/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	var allowed []string
	namespaces := ""
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "SystemCallFilter="); ok && !strings.HasPrefix(v, "~") {
			allowed = append(allowed, strings.Fields(v)...)
		}
		if v, ok := strings.CutPrefix(line, "RestrictNamespaces="); ok {
			namespaces = v
		}
	}
	for _, call := range []string{"seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"} {
		if !slices.Contains(allowed, call) {
			t.Errorf("configs/pyrun.service's SystemCallFilter does not allow %s", call)
		}
	}
	if namespaces != "user net" {
		t.Errorf("RestrictNamespaces=%s, want user net", namespaces)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/supervisor"
)

// The example config is the documentation of the config file: it holds
// every key, each with its note, at its default (exampleConfig writes it
// from the table of settings; -update-docs rewrites it), and loads cleanly.
func TestExampleConfig(t *testing.T) {
	const path = examplePath
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gen bytes.Buffer
	if err := exampleConfig(&gen); err != nil {
		t.Fatal(err)
	}
	switch {
	case *updateDocs && !bytes.Equal(b, gen.Bytes()):
		if err := os.WriteFile(path, gen.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		b = gen.Bytes()
	case !bytes.Equal(b, gen.Bytes()):
		t.Errorf("%s does not match the table of settings (cmd/pyrun/flagrows.go): run `go generate ./cmd/pyrun` and commit it. First difference:\n%s", path, firstDifference(b, gen.Bytes()))
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var o options
	o.flagSet("pyrun").VisitAll(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		key := configKey(f.Name)
		if _, ok := keys[key]; !ok {
			t.Errorf("%s has no key %q (flag --%s)", path, key, f.Name)
		}
		if _, ok := keys["//"+key]; !ok {
			t.Errorf("%s does not explain %q (a \"//%s\" key)", path, key, key)
		}
	})
	loaded, _, err := loadOptions("serve", []string{"--config", path})
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	defaults, _, err := loadOptions("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, want := loaded.settings(), defaults.settings()
	for name := range want {
		// workers: the example pins a dev box's two; config: the file itself;
		// session-store: a service's folder, where the default is the user's.
		if name != "workers" && name != "config" && name != "session-store" && got[name] != want[name] {
			t.Errorf("%s sets %s to %q, but the default is %q", path, name, got[name], want[name])
		}
	}
}

// docs/configuration.md names every flag.
func TestDocsNameEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var o options
	o.flagSet("pyrun").VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(b), "`--"+f.Name) {
			t.Errorf("docs/configuration.md does not document --%s", f.Name)
		}
	})
}

// The systemd unit must verify cleanly, score as hardened, and start pyrun
// with flags and a config that load. systemd-analyze comes with Debian's
// systemd package, which .ci/run installs when it is missing.
// The unit's TasksMax leaves room for every worker the example config
// allows (the pool's and the sessions') at its thread limit, so that a call
// making threads meets pyrun's limit first.
func TestSystemdTasksMax(t *testing.T) {
	unit, err := os.ReadFile("../../configs/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TasksMax=(\d+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("pyrun.service sets no TasksMax")
	}
	tasks, _ := strconv.Atoi(string(m[1]))
	o, _, err := loadOptions("serve", []string{"--config", "../../configs/pyrun.json"})
	if err != nil {
		t.Fatal(err)
	}
	if need := supervisor.TasksFor(workersFor(o), o.supervisor.MaxWorkerThreads); tasks < need {
		t.Errorf("TasksMax=%d; %d workers (%d pool, %d sessions) of at most %d threads need %d",
			tasks, workersFor(o), o.pool(lang.Python).workers, o.sessions.Limits.Max, o.supervisor.MaxWorkerThreads, need)
	}
}

// The unit's memory holds every worker the example config allows, the
// pool's and the sessions', at the most each may hold (memoryFor), below
// the point where the kernel throttles the service; and a worker the
// kernel kills for memory does not stop the service.
func TestSystemdMemory(t *testing.T) {
	unit, err := os.ReadFile("../../configs/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := loadOptions("serve", []string{"--config", "../../configs/pyrun.json"})
	if err != nil {
		t.Fatal(err)
	}
	most, _ := memoryFor(o)
	high, ceiling := systemdBytes(t, unit, "MemoryHigh"), systemdBytes(t, unit, "MemoryMax")
	if high < most {
		t.Errorf("MemoryHigh=%dM; %d workers and %d sessions of %s (languages %v) may hold %dM (pyrun.service's formula)",
			high>>20, o.pool(lang.Python).workers, o.sessions.Limits.Max, o.pool(lang.Python).memoryLimit, o.languages, most>>20)
	}
	if ceiling < high {
		t.Errorf("MemoryMax=%dM is below MemoryHigh=%dM", ceiling>>20, high>>20)
	}
	if !regexp.MustCompile(`(?m)^OOMPolicy=continue$`).Match(unit) {
		t.Error("no OOMPolicy=continue: a worker killed for memory would stop the whole service")
	}
}

// systemdBytes is a unit's size setting (bytes, or K, M, G, T: powers of
// 1024, as systemd reads them).
func systemdBytes(t *testing.T, unit []byte, key string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + `=(\d+)([KMGT]?)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("pyrun.service sets no %s in bytes, K, M, G or T", key)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << map[string]int{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[string(m[2])]
}

func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: apt-get install systemd (the CI script does)")
	}
	unit, err := os.ReadFile("../../configs/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's program exists: point it at an
	// executable that does (this test binary), keeping the rest as shipped.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/pyrun", self)
	path := filepath.Join(t.TempDir(), "pyrun.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	out, err = exec.Command(analyze, "security", "--offline=yes", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for pyrun\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2.0 {
		t.Errorf("exposure level %v, want at most 2.0 (hardened):\n%s", level, out)
	}

	// ExecStart's arguments, with the example config, load.
	line := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(string(unit))
	if line == nil {
		t.Fatal("no ExecStart line")
	}
	args := strings.Fields(line[1])
	if len(args) < 2 || args[0] != "/usr/local/bin/pyrun" || args[1] != "serve" {
		t.Fatalf("ExecStart=%s, want /usr/local/bin/pyrun serve ...", line[1])
	}
	for i, a := range args {
		switch a {
		case "/etc/pyrun/pyrun.json":
			args[i] = "../../configs/pyrun.json"
		case "${CACHE_DIRECTORY}":
			args[i] = t.TempDir()
		}
	}
	if _, _, err := loadOptions("serve", args[2:]); err != nil {
		t.Errorf("ExecStart's flags do not load: %v", err)
	}
}

// The user units (docs/contract.md section 16) verify cleanly in a user manager,
// the socket is owner-only at $XDG_RUNTIME_DIR/pyrun.sock (where pyrun
// stdio looks), and the service serves that socket with flags that load.
// TestSocketActivation runs the service's ExecStart under socket activation.
func TestUserUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: apt-get install systemd (the CI script does)")
	}
	socket, err := os.ReadFile("../../configs/user/pyrun.socket")
	if err != nil {
		t.Fatal(err)
	}
	service, err := os.ReadFile("../../configs/user/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ListenStream=%t/pyrun.sock", "SocketMode=0600", "DirectoryMode=0700", "WantedBy=sockets.target"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).Match(socket) {
			t.Errorf("pyrun.socket has no line %s", want)
		}
	}

	// verify checks that ExecStart's program exists: point it at this
	// test binary; a user manager needs a runtime folder.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runtime := filepath.Join(dir, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	svcPath, sockPath := filepath.Join(dir, "pyrun.service"), filepath.Join(dir, "pyrun.socket")
	if err := os.WriteFile(svcPath, []byte(strings.ReplaceAll(string(service), "%h/.local/bin/pyrun", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sockPath, socket, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--user", sockPath, svcPath)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify --user: %v\n%s", err, out)
	}

	sock := filepath.Join(runtime, "pyrun.sock")
	o, _, err := loadOptions("serve", userServiceArgs(t, sock)[1:])
	if err != nil {
		t.Fatalf("ExecStart's flags do not load: %v", err)
	}
	if o.socket != sock {
		t.Errorf("the service serves --socket %q, not the socket unit's %%t/pyrun.sock", o.socket)
	}
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	var stdio options
	stdio.flagSet("stdio")
	if got := stdio.stdioSocket(); got != sock {
		t.Errorf("pyrun stdio looks for %s by default, not the socket unit's %s", got, sock)
	}
}

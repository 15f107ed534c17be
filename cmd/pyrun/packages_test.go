package main

import (
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

// demoWheelhouse is a wheelhouse with two versions of pyrun-demo.
func demoWheelhouse(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, v := range []string{"1.0", "2.0"} {
		packagestest.Wheel{Name: "pyrun-demo", Version: v,
			Files: map[string]string{"pyrun_demo/__init__.py": "VERSION = '" + v + "'\n"}}.Write(t, dir)
	}
	return dir
}

// TestPackages runs imports and PEP 723 blocks through pyrun stdio and a
// real MCP client, from a wheelhouse on this offline machine.
func TestPackages(t *testing.T) {
	s := newServer(t, "--workers", "2", "--wheelhouse", demoWheelhouse(t), "--network", "none")

	r := s.run(t, "import pyrun_demo\npyrun_demo.VERSION")
	wantValue(t, r, `"2.0"`)
	if r.sections["dependencies"] != `["pyrun-demo"]` || strings.Join(r.sc.Dependencies, ",") != "pyrun-demo" {
		t.Errorf("dependencies: text %q, structured %v", r.sections["dependencies"], r.sc.Dependencies)
	}

	r = s.run(t, "# /// script\n# dependencies = [\"pyrun-demo<2\"]\n# ///\nimport pyrun_demo\npyrun_demo.VERSION")
	if r.sc.Status == "install-error" { // the worker had 2.0 loaded: the next call gets a fresh one
		if !strings.Contains(r.sections["error"], "pyrun-demo 2.0 is loaded in this worker") {
			t.Errorf("pin against a loaded version: %s", r.text)
		}
		r = s.run(t, "# /// script\n# dependencies = [\"pyrun-demo<2\"]\n# ///\nimport pyrun_demo\npyrun_demo.VERSION")
	}
	wantValue(t, r, `"1.0"`)

	r = s.run(t, "# /// script\n# dependencies = [\"pyrun-demo==7\"]\n# ///\n1")
	wantStatus(t, r, "install-error")
	if !strings.Contains(r.sections["error"], "pyrun-demo==7") || r.sc.ExitCode != 1 || !r.isError {
		t.Errorf("unsatisfiable pin: %s", r.text)
	}

	r = s.run(t, "import numpy")
	wantStatus(t, r, "install-error")
	if !strings.Contains(r.sections["error"], "numpy") || !strings.Contains(r.sections["error"], "network mode is none") {
		t.Errorf("numpy with the network off: %s", r.text)
	}
	wantValue(t, s.run(t, "6 * 7"), "42")
}

// TestWarmupDeps: pyrun warmup --deps fetches the deps into the cache and
// says what it cached.
func TestWarmupDeps(t *testing.T) {
	needBinary(t)
	// --network none: nothing but the wheelhouse is asked.
	stdout, stderr, code := pyrunCmd(t, "", "warmup", "--network", "none", "--wheelhouse", demoWheelhouse(t), "--deps", "pyrun-demo==1.0")
	if code != 0 {
		t.Fatalf("warmup: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !regexp.MustCompile(`(?m)^  packages +ok +cached pyrun-demo 1\.0 in \S+`).MatchString(stdout) {
		t.Errorf("warmup did not say what it cached:\n%s", stdout)
	}
	stdout, _, code = pyrunCmd(t, "", "warmup", "--network", "none", "--wheelhouse", demoWheelhouse(t), "--deps", "pyrun-demo==9")
	if code == 0 || !strings.Contains(stdout, "packages   FAIL") || !strings.Contains(stdout, "pyrun-demo==9") {
		t.Errorf("warmup with deps that cannot be had: exit %d\n%s", code, stdout)
	}
}

// TestUnreachableIndexSaysSo: an import from a package index this machine
// cannot reach ends in an error that names the index and the ways out.
func TestUnreachableIndexSaysSo(t *testing.T) {
	needBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/"
	ln.Close()
	stdout, stderr, code := pyrunCmd(t, "import numpy\n", "run", "--package-index", down, "-")
	if code != 1 || !strings.Contains(stdout, "<status>install-error</status>") {
		t.Fatalf("exit %d, want 1 and install-error\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"import numpy: the package index " + down + " cannot be reached (connect to ", "--package-index directory", "--wheelhouse"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the error does not say %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "dial tcp") {
		t.Errorf("the error quotes the dialer:\n%s", stdout)
	}
}

// TestWarmupChecksThePackageIndex: pyrun warmup says whether the package
// index and PyPI it will use answer; one that does not is a warning (calls
// still load what is cached), not a failure.
func TestWarmupChecksThePackageIndex(t *testing.T) {
	needBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/"
	ln.Close()
	stdout, stderr, code := pyrunCmd(t, "", "warmup", "--package-index", down, "--pypi", down+"pypi/")
	if code != 0 {
		t.Fatalf("warmup with an index that does not answer: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	line := regexp.MustCompile(`(?m)^  packages +WARN +(.*)$`).FindStringSubmatch(stdout)
	if line == nil {
		t.Fatalf("no warning from the packages step:\n%s", stdout)
	}
	for _, want := range []string{"the package index " + down + " cannot be reached (connect to ", "PyPI " + down + "pypi/ cannot be reached", "--package-index directory", "--wheelhouse"} {
		if !strings.Contains(line[1], want) {
			t.Errorf("the warning does not say %q: %s", want, line[1])
		}
	}
	if !strings.Contains(stdout, "ready, with the warnings above") {
		t.Errorf("warmup does not end by pointing at its warnings:\n%s", stdout)
	}

	// The control: an index and a PyPI on loopback that answer.
	idx := t.TempDir()
	packagestest.Index(t, idx, nil, nil)
	srv, _ := packagestest.Serve(t, idx)
	stdout, _, code = pyrunCmd(t, "", "warmup", "--package-index", srv.URL, "--pypi", srv.URL+"/pypi/")
	want := "; the package index " + srv.URL + "/ and PyPI " + srv.URL + "/pypi/ answered"
	if code != 0 || !regexp.MustCompile(`(?m)^  packages +ok +.*`+regexp.QuoteMeta(want)).MatchString(stdout) {
		t.Errorf("warmup with sources that answer: exit %d, want 0 and %q\n%s", code, want, stdout)
	}
}

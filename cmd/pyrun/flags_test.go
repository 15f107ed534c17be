package main

// The command line's errors (flags.go): each says what to type instead.

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runArgs runs pyrun in this process with args and no input, as a shell
// would, returning its stderr and exit status. Only for command lines that
// fail or print before anything starts.
func runArgs(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return stdout.String() + stderr.String(), code
}

// A duration without a unit is refused with the unit it needs, for every
// duration flag (declared in any file) and in the config file; one with a
// unit is taken.
func TestDurationNeedsAUnit(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"run", "--timeout", "5"}},
		{[]string{"stdio", "--session-idle=5"}}, // pysessions.go
		{[]string{"serve", "--task-ttl", "5"}},  // local.go
		{[]string{"warmup", "--queue-timeout", "5"}},
	} {
		out, code := runArgs(t, tc.args...)
		name := strings.TrimPrefix(strings.SplitN(tc.args[1], "=", 2)[0], "--")
		want := "--" + name + " 5: a duration needs a unit, e.g. 5s (or 500ms, 2m, 1h)"
		if code != exitUsage || !strings.Contains(out, want) || strings.Contains(out, "parse error") {
			t.Errorf("pyrun %s: exit %d, output %q; want %d and %q", strings.Join(tc.args, " "), code, out, exitUsage, want)
		}
	}
	out, _ := runArgs(t, "stdio", "--timeout", "5 sec")
	if !strings.Contains(out, `--timeout 5 sec: not a duration: use a number and a unit, e.g. 5s, 500ms, 2m or 1h`) {
		t.Errorf("a duration that is no number: %q", out)
	}
	cfg := writeConfig(t, `{"timeout": 5}`)
	if _, _, err := loadOptions("stdio", []string{"--config", cfg}); err == nil || !strings.Contains(err.Error(), `key "timeout": a duration needs a unit, e.g. 5s`) {
		t.Errorf("config timeout 5: %v", err)
	}
	// Control: with a unit, and a plain 0, it is taken.
	for _, v := range []string{"5s", "1.5s", "500ms"} {
		o, _, err := loadOptions("stdio", []string{"--timeout", v})
		if err != nil || o.supervisor.Timeout.String() != v {
			t.Errorf("--timeout %s: %v, %v", v, o, err)
		}
	}
	// 0 is never, which httpfront spells -1 (its 0 is its default).
	if o, _, err := loadOptions("stdio", []string{"--keep-alive", "0"}); err != nil || o.http.KeepAlive != -1 || o.settings()["keep-alive"] != "0s" {
		t.Errorf("--keep-alive 0: %v", err)
	}
	if out, _ := runArgs(t, "stdio", "--keep-alive", "5"); !strings.Contains(out, "--keep-alive 5: a duration needs a unit, e.g. 5s") {
		t.Errorf("--keep-alive 5: %s", out)
	}
	// A number flag that is given no number says so too.
	if out, _ := runArgs(t, "stdio", "--max-queue", "many"); !strings.Contains(out, `--max-queue many: "many" is not a number`) {
		t.Errorf("--max-queue many: %q", out)
	}
}

// writeConfig writes a config file of body and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pyrun.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A mistyped flag is answered with the known flag nearest to it, the
// command's own before another command's; one near none says where the
// flags are listed.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"run --timout 1s", "unknown flag --timout: did you mean --timeout?"},
		{"run -timout 1s", "unknown flag --timout: did you mean --timeout?"},
		{"serve --listn 127.0.0.1:0", "unknown flag --listn: did you mean --listen?"},
		{"stdio --worker 2", "unknown flag --worker: did you mean --workers?"},
		{"run --langauge javascript", "unknown flag --langauge: did you mean --language?"},
		{"stdio --sesion-store none", "unknown flag --sesion-store: did you mean --session-store?"},
		// As near to --go-memory-limit, a service's: run's own flag wins;
		// stdio has both, and takes the first.
		{"run --g-memory-limit 1GiB", "unknown flag --g-memory-limit: did you mean --r-memory-limit?"},
		{"stdio --g-memory-limit 1GiB", "unknown flag --g-memory-limit: did you mean --go-memory-limit?"},
		{"serve --frobnicate", "unknown flag --frobnicate (pyrun serve --help lists its flags)"},
		{"srve --listen none", `unknown command "srve": did you mean serve?`},
		{"versoin", `unknown command "versoin": did you mean version?`},
		{"frobnicate", `unknown command "frobnicate"` + "\n"},
	} {
		out, code := runArgs(t, strings.Fields(tc.args)...)
		if code != exitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("pyrun %s: exit %d, output %q; want %d and %q", tc.args, code, out, exitUsage, tc.want)
		}
	}
}

// Flags after `pyrun run`'s file are flags, not more files; after "--"
// everything is a file, even what looks like a flag.
func TestFlagsAfterTheFile(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		timeout string
	}{
		{[]string{"file.py", "--timeout", "1s"}, []string{"file.py"}, "1s"},
		{[]string{"--timeout", "1s", "file.py"}, []string{"file.py"}, "1s"},        // control: before it
		{[]string{"file.py", "--timeout=2s", "-"}, []string{"file.py", "-"}, "2s"}, // two files: run refuses them
		{[]string{"--", "--timeout", "1s"}, []string{"--timeout", "1s"}, "30s"},
		{[]string{"file.py", "--", "--timeout"}, []string{"file.py", "--timeout"}, "30s"},
		{[]string{"--stateless", "--", "x.py"}, []string{"x.py"}, "30s"},
	} {
		o, pos, err := loadOptions("run", tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !slices.Equal(pos, tc.pos) || o.supervisor.Timeout.String() != tc.timeout {
			t.Errorf("%q: files %q, timeout %s; want %q and %s", tc.args, pos, o.supervisor.Timeout, tc.pos, tc.timeout)
		}
	}
	// A mistyped flag after the file is a flag error too, not a file.
	if out, _ := runArgs(t, "run", "file.py", "--timout", "1s"); !strings.Contains(out, "did you mean --timeout?") {
		t.Errorf("a mistyped flag after the file: %q", out)
	}
}

// `pyrun run FILE --timeout 1s` runs FILE under a 1s limit: a 3s sleep
// times out (exit 124) instead of the flag being taken for a second file.
func TestRunFlagsAfterTheFile(t *testing.T) {
	needBinary(t)
	file := filepath.Join(t.TempDir(), "slow.py")
	if err := os.WriteFile(file, []byte("import time\ntime.sleep(3)\nprint('done')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := pyrunCmd(t, "", "run", file, "--timeout", "1s")
	if code != 124 || strings.Contains(stdout, "done") {
		t.Errorf("exit %d, want 124 (timeout)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// pyrun run and warmup log at warn unless told otherwise; the servers at
// info.
func TestRunAndWarmupLogWarnings(t *testing.T) {
	cfg := writeConfig(t, `{"log_level": "debug"}`)
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"run", nil, "warn"},
		{"warmup", nil, "warn"},
		{"run", []string{"--log-level", "info"}, "info"},
		{"warmup", []string{"--config", cfg}, "debug"},
		{"stdio", nil, "info"},
		{"serve", nil, "info"},
	} {
		o, _, err := loadOptions(tc.cmd, tc.args)
		if err != nil || o.logLevel != tc.want {
			t.Errorf("pyrun %s %q: log level %v (%v), want %s", tc.cmd, tc.args, o, err, tc.want)
		}
	}
}

// pyrun run's stderr carries no info lines by default: a person reads its
// output at a terminal. --log-level info brings them back.
func TestRunPrintsNoInfoLogs(t *testing.T) {
	needBinary(t)
	stdout, stderr, code := pyrunCmd(t, "print('hi')", "run", "-")
	if code != 0 || !strings.Contains(stdout, "hi") || strings.Contains(stderr, "[INFO]") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0, hi, and no [INFO] line", code, stdout, stderr)
	}
	_, stderr, _ = pyrunCmd(t, "print('hi')", "run", "--log-level", "info", "-")
	if !strings.Contains(stderr, "[INFO]") {
		t.Errorf("--log-level info logged no info line:\n%s", stderr)
	}
}

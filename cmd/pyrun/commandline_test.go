package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/lang"
)

// ---- the command line -------------------------------------------------------

// pyrunCmd runs the binary with args and stdin, returning stdout, stderr and
// the exit status.
func pyrunCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyrunBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		t.Fatalf("pyrun %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String(), code
}

func TestRunCommand(t *testing.T) {
	needBinary(t)
	file := filepath.Join(t.TempDir(), "snippet.py")
	if err := os.WriteFile(file, []byte("print('from a file')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stdin string
		args        []string
		wantCode    int
		wantStatus  string
		wantStdout  string // exactly, when not empty
		wantInBlock string
	}{
		{
			name: "success", stdin: "print('hello')\n1 + 2\n", args: []string{"-"},
			wantCode: 0, wantStatus: "success",
			wantStdout: "<status>success</status>\n<output>\nhello\n</output>\n<return_value>\n3\n</return_value>\n",
		},
		{
			name: "file", args: []string{file},
			wantCode: 0, wantStatus: "success",
			wantStdout: "<status>success</status>\n<output>\nfrom a file\n</output>\n",
		},
		{
			name: "python error", stdin: "print('before')\n1 / 0\n", args: []string{"-"},
			wantCode: 1, wantStatus: "run-error", wantInBlock: "ZeroDivisionError",
		},
		{
			name: "timeout", stdin: "print('before the loop')\nwhile True:\n    pass\n", args: []string{"--timeout", "1s", "-"},
			wantCode: 124, wantStatus: "timeout", wantInBlock: "before the loop",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := pyrunCmd(t, tc.stdin, append([]string{"run"}, tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			if tc.wantStdout != "" && stdout != tc.wantStdout {
				t.Errorf("stdout:\n%q\nwant:\n%q", stdout, tc.wantStdout)
			}
			block, ok := strings.CutSuffix(stdout, "\n")
			if !ok {
				t.Fatalf("stdout does not end with a newline: %q", stdout)
			}
			secs, err := parseBlock(block)
			if err != nil {
				t.Fatalf("stdout is not just the result block: %v\n%s", err, stdout)
			}
			if secs["status"] != tc.wantStatus {
				t.Errorf("status %q, want %q", secs["status"], tc.wantStatus)
			}
			if !strings.Contains(block, tc.wantInBlock) {
				t.Errorf("stdout lacks %q:\n%s", tc.wantInBlock, stdout)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	needBinary(t)
	stdout, stderr, code := pyrunCmd(t, "", "version")
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^pyrun \S+$`),
		regexp.MustCompile(`^deno \d+\.\d+\.\d+\b`),
		regexp.MustCompile(`^pyodide \d+\.\d+\.\d+$`),
		regexp.MustCompile(`^python 3\.\d+\.\d+$`),
	}
	// Then every language, with its engine's versions.
	for _, l := range lang.All() {
		if l.ID == "python" {
			want = append(want, regexp.MustCompile(`^language python: run_python_code, pyodide \d+\.\d+\.\d+, python 3\.\d+\.\d+$`))
			continue
		}
		want = append(want, regexp.MustCompile(`^language `+l.ID+`: run_\w+_code, \w+ \S+(, \w+ \S+)*$`))
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d is %q, want it to match %s", i+1, lines[i], re)
		}
	}
}

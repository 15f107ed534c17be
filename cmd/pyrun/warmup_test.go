package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

func TestWarmup(t *testing.T) {
	needBinary(t)
	// The package index and PyPI on loopback: warmup asks whether they answer.
	idx := t.TempDir()
	packagestest.Index(t, idx, nil, nil)
	srv, _ := packagestest.Serve(t, idx)
	stdout, stderr, code := pyrunCmd(t, "", "warmup", "--package-index", srv.URL, "--pypi", srv.URL+"/pypi/")
	if code != 0 {
		t.Fatalf("warmup: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, step := range []string{"runtime", "deno", "os sandbox", "pyodide", "snapshot", "packages", "worker", "self-test", "sandbox", "interrupt"} {
		if !regexp.MustCompile(`(?m)^  ` + step + ` +ok +\S`).MatchString(stdout) {
			t.Errorf("warmup did not report step %s as ok:\n%s", step, stdout)
		}
	}
	// The machine pyrun is tested on offers every layer (docs/architecture.md, Facts).
	if !regexp.MustCompile(`os sandbox +ok +auto: rlimits, no_new_privs, landlock \(ABI \d+\), seccomp, netns \[`).MatchString(stdout) {
		t.Errorf("warmup does not name every layer of the OS sandbox:\n%s", stdout)
	}
}

func TestWarmupSaysWhatIsMissing(t *testing.T) {
	needBinary(t)
	// A runtime folder whose pieces are fakes: a Deno that runs or not,
	// Pyodide's metadata with or without its files.
	fakeRuntime := func(t *testing.T, deno string, pyodideFiles bool) string {
		root := t.TempDir()
		dir, err := supervisor.RuntimeDir(root)
		if err != nil {
			t.Fatal(err)
		}
		denoPath := filepath.Join(dir, "node_modules", "@deno", "linux-x64-glibc", "deno")
		pyodide := filepath.Join(dir, "node_modules", "pyodide")
		for _, d := range []string{filepath.Dir(denoPath), pyodide} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		files := map[string]string{
			denoPath: "#!/bin/sh\n" + deno + "\n",
			filepath.Join(pyodide, "pyodide-lock.json"): `{"info": {"python": "3.14.2"}}`,
			filepath.Join(pyodide, "package.json"):      `{"version": "314.0.7"}`,
		}
		if pyodideFiles {
			for _, f := range []string{"pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"} {
				files[filepath.Join(pyodide, f)] = ""
			}
		}
		for p, body := range files {
			if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	noNPM := t.TempDir() // a PATH without npm
	for _, tc := range []struct {
		name, root string
		path       string
		want       []string
	}{
		{"no runtime and no npm", t.TempDir(), noNPM, []string{"runtime    FAIL", "npm is not on PATH"}},
		{"deno does not run", fakeRuntime(t, "echo 'cannot execute binary file' >&2; exit 126", true), "", []string{"deno       FAIL", "does not run"}},
		{"no pyodide files", fakeRuntime(t, "echo 'deno 2.9.6 (stable)'", false), "", []string{"pyodide    FAIL", "pyodide.asm.wasm", "python_stdlib.zip"}},
		{"worker program does not run", fakeRuntime(t, "if [ \"$1\" = --version ]; then echo 'deno 2.9.6 (stable)'; exit 0; fi\necho 'error: Module not found' >&2\nexit 1", true), "", []string{"snapshot   FAIL", "could not be made", "Module not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, pyrunBin, "warmup", "--runtime-dir", tc.root)
			if tc.path != "" {
				cmd.Env = append(os.Environ(), "PATH="+tc.path)
			}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("warmup: %v, want a non-zero exit\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("warmup's output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// textOf is the text of a result's first content block.
func textOf(r *sdk.CallToolResult) string {
	if len(r.Content) == 0 {
		return ""
	}
	if tc, ok := r.Content[0].(*sdk.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprint(r.Content[0])
}

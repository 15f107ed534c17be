package main

// End-to-end tests of run_javascript_code: `pyrun stdio --languages
// python,javascript` with a real go-sdk client and real Deno workers.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp/mcptest"
)

func TestJavaScriptTool(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.csv"), []byte("n\n1\n2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ro, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newLanguageServer(t, "python,javascript", "--workers", "1", "--js-workers", "1",
		"--mount", ro+":/data", "--mount", rw+":/shared/out:rw")
	if got := mcptest.ToolNames(t, s.session); strings.Join(got, ",") != "run_javascript_code,run_python_code" {
		t.Fatalf("tools %v, want run_javascript_code and run_python_code", got)
	}
	js := func(code string) result {
		t.Helper()
		return s.runIn(t, "run_javascript_code", "javascript_code", code)
	}

	t.Run("print and value", func(t *testing.T) {
		r := js("console.log('hi');\nconsole.error('oops');\n6 * 7")
		wantValue(t, r, "42")
		if r.sc.Stdout != "hi\n" || r.sc.Stderr != "oops\n" || len(r.sc.Output) != 2 ||
			r.sc.Output[0].Stream != "stdout" || r.sc.Output[1].Stream != "stderr" {
			t.Errorf("streams: stdout %q stderr %q output %+v", r.sc.Stdout, r.sc.Stderr, r.sc.Output)
		}
		if !strings.Contains(r.text, "<output>\nhi\noops\n</output>") {
			t.Errorf("text block:\n%s", r.text)
		}
	})
	t.Run("TypeScript and await", func(t *testing.T) {
		r := js("interface P { x: number; y: number }\nconst p: P = { x: 3, y: 4 };\n" +
			"await new Promise((r) => setTimeout(r, 5));\nMath.hypot(p.x, p.y) as number")
		wantValue(t, r, "5")
	})
	t.Run("error", func(t *testing.T) {
		r := js("function f(): never {\n  throw new TypeError('bad input');\n}\nf();")
		wantStatus(t, r, "run-error")
		if r.sc.Error == nil || !strings.HasPrefix(*r.sc.Error, "TypeError: bad input\n    at f (main.ts:2:9)\n    at main.ts:4:1") ||
			r.sc.ExitCode != 1 {
			t.Fatalf("error %v, exit code %d", r.sc.Error, r.sc.ExitCode)
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := js("await Deno.readTextFile('/etc/passwd')")
		wantStatus(t, r, "run-error")
		if !strings.Contains(*r.sc.Error, "NotCapable") {
			t.Fatalf("error %q, want Deno's NotCapable", *r.sc.Error)
		}
	})
	t.Run("files and displays", func(t *testing.T) {
		r, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "const t = pyrun.readTextFile('in.txt');\n" +
				"pyrun.writeFile('/output/out.txt', t.toUpperCase());\n" +
				"pyrun.display('<svg xmlns=\"http://www.w3.org/2000/svg\"/>', 'image/svg+xml');\nt.length",
			"files": map[string]any{"in.txt": "hello"},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, r, "5")
		if len(r.sc.Files) != 1 || r.sc.Files[0].Path != "out.txt" || r.sc.Files[0].Bytes != 5 {
			t.Errorf("files %+v", r.sc.Files)
		}
		if len(r.sc.Displays) != 1 || r.sc.Displays[0].MIMEType != "image/svg+xml" {
			t.Errorf("displays %+v", r.sc.Displays)
		}
	})
	t.Run("mounts", func(t *testing.T) {
		// pyrun's API reads a mounted folder at its sandbox path and writes
		// only into a :rw one; the Worker's own grants are the mounts' and
		// nothing more: Deno refuses a write to the read-only folder, and
		// a path cannot climb out of its mount by name.
		host, _ := filepath.EvalSymlinks(ro)
		r := js(`const fails = (f: () => unknown) => { try { f(); return "no error"; } catch (e) { return (e as Error).message; } };
pyrun.writeFile("/shared/out/sub/r.txt", "from JS");
({
  text: pyrun.readTextFile("/data/in.csv"),
  ls: pyrun.readDir("/data"),
  ro: fails(() => pyrun.writeFile("/data/x.txt", "no")),
  direct: fails(() => Deno.writeTextFileSync(` + strconv.Quote(host+"/x.txt") + `, "no")),
  passwd: fails(() => Deno.readTextFileSync("/etc/passwd")),
  climb: fails(() => pyrun.readFile("/data/../../etc/passwd")),
  missing: fails(() => pyrun.readFile("/data/nope.csv")),
  back: pyrun.readTextFile("/shared/out/sub/r.txt"),
})`)
		var v map[string]any
		if err := json.Unmarshal(r.sc.ReturnValue, &v); err != nil {
			t.Fatalf("return_value %s: %v", r.sc.ReturnValue, err)
		}
		for key, want := range map[string]string{
			"text":    "n\n1\n2\n",
			"ls":      "[in.csv sub/]",
			"ro":      "pyrun.writeFile: /data/x.txt: /data is mounted read-only",
			"climb":   "pyrun.readFile: no such file: /data/../../etc/passwd",
			"missing": "pyrun.readFile: /data/nope.csv: no such file or folder",
			"back":    "from JS",
		} {
			if got := fmt.Sprint(v[key]); got != want {
				t.Errorf("%s: %q, want %q", key, got, want)
			}
		}
		for _, key := range []string{"direct", "passwd"} {
			if got := fmt.Sprint(v[key]); !strings.Contains(got, "Requires") {
				t.Errorf("%s: %q, want Deno's refusal", key, got)
			}
		}
		if _, err := os.Stat(filepath.Join(ro, "x.txt")); err == nil {
			t.Error("the read-only mount was written")
		}
		if b, err := os.ReadFile(filepath.Join(rw, "sub", "r.txt")); err != nil || string(b) != "from JS" {
			t.Errorf("the :rw mount holds %q (%v)", b, err)
		}
		if d := s.toolDescription(t, "run_javascript_code"); !strings.Contains(d, "at: /data, /shared/out (writable)") ||
			!strings.Contains(d, "pyrun.readDir") {
			t.Errorf("run_javascript_code's description does not tell of the mounts:\n%s", d)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		began := time.Now()
		r, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "console.log('spinning');\nwhile (true) {}", "timeout_seconds": 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "timeout")
		if took := time.Since(began); took > 15*time.Second {
			t.Errorf("a 1 s timeout answered after %s", took)
		}
		// The worker was replaced: the next call runs.
		wantValue(t, js("'after'"), `"after"`)
	})
	t.Run("session", func(t *testing.T) {
		r, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "let total = 1;\nfunction add(n: number) { total += n; return total }",
			"session_id":      "new",
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, "success")
		id := r.sc.SessionID
		if id == "" {
			t.Fatalf("no session id:\n%s", r.text)
		}
		r, err = s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "add(2);\ntotal", "session_id": id,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, r, "3")
		// A second session of the same client: a realm of its own on the
		// same session worker (--session-worker shared), which sees
		// neither the first's globals nor its timers' output.
		if _, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": `setInterval(() => console.log("tick of the first"), 20); "armed"`, "session_id": id,
		}); err != nil {
			t.Fatal(err)
		}
		r2, err := s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "await new Promise((ok) => setTimeout(ok, 200));\ntypeof total", "session_id": "new",
		})
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, r2, `"undefined"`)
		if strings.Contains(r2.sc.Stdout, "tick") {
			t.Errorf("the second session got the first's timer output: %q", r2.sc.Stdout)
		}
		r, err = s.callTool(t.Context(), "run_javascript_code", map[string]any{
			"javascript_code": "add(2);\ntotal", "session_id": id,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, r, "5")
		// Another language's tool refuses the id.
		res, err := s.callToolRaw(t.Context(), "run_python_code", map[string]any{"python_code": "1", "session_id": id})
		if err == nil && !res.IsError {
			t.Errorf("run_python_code took a JavaScript session's id: %+v", res)
		}
		// Python still runs beside it.
		wantValue(t, s.runIn(t, "run_python_code", "python_code", "6 * 7"), "42")
	})
}

// pyrun run --language javascript runs a TypeScript file; an error exits 1.
func TestRunLanguageJavaScript(t *testing.T) {
	needBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "x.ts")
	if err := os.WriteFile(file, []byte("const n: number = 2;\nconsole.log('from a file');\nn + 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := pyrunCmd(t, "", "run", "--language", "javascript", file)
	if code != 0 || !strings.Contains(stdout, "from a file") || !strings.Contains(stdout, "<return_value>\n4\n</return_value>") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	bad := filepath.Join(dir, "bad.ts")
	if err := os.WriteFile(bad, []byte("throw new Error('no')"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = pyrunCmd(t, "", "run", "--language", "javascript", bad)
	if code != 1 || !strings.Contains(stdout, "Error: no") {
		t.Errorf("error: exit %d, stdout:\n%s", code, stdout)
	}
}

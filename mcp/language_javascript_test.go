package mcp

import (
	"strings"
	"testing"
	"time"
)

// run_javascript_code's description names the pyrun object, the only way
// the code has to files, and what the sandbox refuses.
func TestJavaScriptDescription(t *testing.T) {
	l := testJavaScript
	l.Versions = map[string]string{"deno": "2.9.6", "typescript": "6.0.3"}
	d := l.Describe(l, Options{MaxOutput: 65536, Timeout: 30 * time.Second, Sessions: SessionOptions{Max: 4, Idle: time.Minute, MaxAge: time.Hour}})
	for _, want := range []string{
		"JavaScript or TypeScript", "in Deno 2.9.6", "top-level await", "no permissions",
		"pyrun.readTextFile(path)", `pyrun.writeFile("/output/`, "pyrun.display(data, mimeType)",
		"64 KiB each", "after 30s", `session_id "new"`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "mounted") || strings.Contains(d, "readDir") {
		t.Errorf("without mounts the description tells of some:\n%s", d)
	}
	d = l.Describe(l, Options{MaxOutput: 65536, Timeout: 30 * time.Second, Mounts: []string{"/data", "/scratch (writable)"}})
	for _, want := range []string{"no files but the mounted folders below", "at: /data, /scratch (writable).", "pyrun.readDir(path)", "writes into a writable one"} {
		if !strings.Contains(d, want) {
			t.Errorf("description with mounts lacks %q:\n%s", want, d)
		}
	}
}

package main

// `pyrun stdio` flags that a service it attaches to would not apply
// (local.go): under --attach auto it serves with a pool of its own instead,
// and under --attach required it says they are dropped. The service here
// is a socket that accepts, which is all attaching looks at.

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/mcp/localsock"
)

func TestAttachWithOwnFlags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pyrun.sock")
	ln, err := localsock.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := writeConfig(t, `{"languages": ["python", "javascript"]}`)

	for _, tc := range []struct {
		args   []string
		attach bool
		warn   string // "" for none
	}{
		// The case: --timeout 1s would have let a 2.5s sleep pass.
		{[]string{"--timeout", "1s"}, false, "not attaching to the pyrun service: --timeout set here would not apply there"},
		{[]string{"--workers", "3", "--languages", "python,javascript"}, false, "not attaching to the pyrun service: --workers, --languages set here"},
		{[]string{"--config", cfg}, false, "not attaching to the pyrun service: --languages set here"},
		{[]string{"--attach", "required", "--timeout", "1s"}, true, "attached to the pyrun service: --timeout set here do not apply"},
		// Controls: the bridge's own flags, and a flag at its default.
		{[]string{"--log-level", "debug", "--log-format", "json", "--runtime-dir", t.TempDir()}, true, ""},
		{[]string{"--timeout", "30s"}, true, ""},
		{nil, true, ""},
	} {
		o, _, err := loadOptions("stdio", append([]string{"--socket", sock}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		log, buf := bufLog()
		c, err := attachConn(o, log)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if c != nil {
			c.Close()
		}
		logged := buf.String()
		if (c != nil) != tc.attach {
			t.Errorf("%q: attached %v, want %v\n%s", tc.args, c != nil, tc.attach, logged)
		}
		if tc.warn == "" && strings.Contains(logged, "[WARN]") || tc.warn != "" && !strings.Contains(logged, tc.warn) {
			t.Errorf("%q: logged\n%s\nwant %q", tc.args, logged, tc.warn)
		}
		if n := strings.Count(logged, "[WARN]"); n > 1 {
			t.Errorf("%q: %d warnings, want at most one:\n%s", tc.args, n, logged)
		}
	}
}

// The issue's case, end to end: with a service on the socket, `pyrun stdio
// --timeout 1s` used to attach and let a 2.5s sleep succeed under the
// service's 30s. It now serves by itself, under its 1s.
func TestAttachAutoKeepsOwnTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pyrun.sock")
	startServe(t, "--socket", sock, "--workers", "1", "--listen", "none")
	s := newServer(t, "--socket", sock, "--timeout", "1s", "--workers", "1")
	r := s.run(t, "import time\ntime.sleep(2.5)\n'slept'")
	wantStatus(t, r, "timeout")
	if s.log.count("serving MCP on stdio") != 1 || s.log.count("attached to the pyrun service") != 0 {
		t.Errorf("pyrun stdio did not serve by itself:\n%s", s.log.tail())
	}
	if !strings.Contains(s.log.tail(), "not attaching to the pyrun service: --workers, --timeout set here would not apply there") {
		t.Errorf("pyrun stdio did not say why it did not attach:\n%s", s.log.tail())
	}
}

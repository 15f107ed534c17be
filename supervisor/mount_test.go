package supervisor_test

import (
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// A mount may not cover a folder pyrun or a language keeps for itself, nor
// sit inside one: each is refused with an error that names the folder.
func TestParseMountRefusesPyrunsFolders(t *testing.T) {
	host := t.TempDir()
	for _, sb := range []string{"/home/pyodide", "/home", "/tmp/x", "/output", "/lib/python3.14", "/usr", "/sessions", "/sessions/s1"} {
		_, err := supervisor.ParseMount(host + ":" + sb)
		if err == nil || !strings.Contains(err.Error(), "pyrun's own folder") {
			t.Errorf("mount at %s: %v, want refused as pyrun's own folder", sb, err)
		}
	}
	for _, sb := range []string{"/data", "/srv/in", "/sessions-data"} {
		m, err := supervisor.ParseMount(host + ":" + sb + ":rw")
		if err != nil || m.Path != sb || !m.RW {
			t.Errorf("mount at %s: %+v, %v; want it taken, read-write", sb, m, err)
		}
	}
}

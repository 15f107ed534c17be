package mcp

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goList runs `go list` with args in the test's package folder and returns
// the lines it prints.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// The front end knows nothing of processes (as tailscale's deptest holds
// its packages to their imports): this package starts none (os/exec is
// code mode's, for the MCP servers it connects to), and of the supervisor
// it uses the public API of pools and sessions and the OS sandbox's
// status, never the packages, the worker program or the languages'
// registrations, which are made from it.
func TestFrontEndKnowsNothingOfProcesses(t *testing.T) {
	allowed := []string{
		"github.com/pyrun/pyrun/supervisor", "github.com/pyrun/pyrun/supervisor/sessions",
		"github.com/pyrun/pyrun/supervisor/oswall",
	}
	for _, imp := range goList(t, "-f", `{{join .Imports "\n"}}`, ".") {
		switch {
		case imp == "os/exec":
			t.Errorf("package mcp imports %s", imp)
		case strings.HasPrefix(imp, "github.com/pyrun/pyrun/") && !strings.HasPrefix(imp, "github.com/pyrun/pyrun/mcp/") &&
			!slices.Contains(allowed, imp):
			t.Errorf("package mcp imports %s", imp)
		}
	}
	for _, dep := range goList(t, "-deps", "./...") {
		if strings.HasPrefix(dep, "github.com/pyrun/pyrun/lang") || strings.HasPrefix(dep, "github.com/pyrun/pyrun/cmd") {
			t.Errorf("the front end depends on %s", dep)
		}
	}
}

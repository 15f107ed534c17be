package supervisor_test

import (
	"os/exec"
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

// The supervisor knows processes and limits and nothing of MCP (as
// tailscale's deptest holds its packages to their imports): neither it nor
// any package below it depends on the MCP SDK, the front end, the
// languages' registrations or the binary.
func TestSupervisorKnowsNothingOfMCP(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./...") {
		for _, bad := range []string{
			"github.com/modelcontextprotocol/go-sdk", "github.com/pyrun/pyrun/mcp",
			"github.com/pyrun/pyrun/lang", "github.com/pyrun/pyrun/cmd",
		} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("the supervisor depends on %s", dep)
			}
		}
	}
}

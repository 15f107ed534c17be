package lang_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goList runs `go list` with args in this package's folder and returns
// the words it prints.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

const module = "github.com/pyrun/pyrun/"

// under reports whether pkg is one of prefixes or a package below one.
func under(pkg string, prefixes ...string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") })
}

// The layers' import rules, held as tailscale's deptest holds its packages
// to theirs. This package is where a language's two parts meet; below it:
//   - the supervisor knows processes and limits and nothing of MCP:
//     neither it nor any package under it depends on the MCP SDK,
//     OpenTelemetry (a call's trace reaches it as plain strings,
//     Job.TraceID), the front end, this package or the binary;
//   - the front end knows nothing of processes: package mcp starts none
//     (os/exec is code mode's, for the MCP servers it connects to) and
//     uses of the supervisor the public API of pools and sessions and the
//     OS sandbox's status, never the packages or the worker program (and
//     internal/bytesize, how every setting writes a size); no package of
//     it depends on this package or the binary.
func TestImportRules(t *testing.T) {
	for _, dep := range goList(t, "-deps", "../supervisor/...") {
		if under(dep, "github.com/modelcontextprotocol/go-sdk", "go.opentelemetry.io", module+"mcp", module+"lang", module+"cmd") {
			t.Errorf("the supervisor depends on %s", dep)
		}
	}
	allowed := []string{module + "supervisor", module + "supervisor/sessions", module + "supervisor/oswall", module + "internal/bytesize"}
	for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, "../mcp") {
		if imp == "os/exec" || strings.HasPrefix(imp, module) && !under(imp, module+"mcp") && !slices.Contains(allowed, imp) {
			t.Errorf("package mcp imports %s", imp)
		}
	}
	for _, dep := range goList(t, "-deps", "../mcp/...") {
		if under(dep, module+"lang", module+"cmd") {
			t.Errorf("the front end depends on %s", dep)
		}
	}
}

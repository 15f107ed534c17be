package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestConformance runs the official MCP conformance suite against pyrun
// serve through scripts/conformance/run.sh: every scenario passes but those
// expected to fail (scripts/conformance/expected-failures.yml, explained in
// its README). The first run installs the suite and Node.js 22 with npm.
func TestConformance(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/conformance/run.sh")
	cmd.Env = append(os.Environ(), "PYRUN_BIN="+pyrunBin, "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("conformance suite: %v\n%s", err, out)
	}
	t.Logf("%s", lastLines(string(out), 4))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

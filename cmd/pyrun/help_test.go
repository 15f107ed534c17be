package main

// `pyrun --help` and `pyrun CMD --help` (help.go): a command's flags only,
// its most used first, then by group; every flag is some command's.

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// helpFlags are the flags a help text lists, in order.
func helpFlags(help string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	return names
}

func TestCommandHelp(t *testing.T) {
	var o options
	total := 0
	o.flagSet("pyrun").VisitAll(func(*flag.Flag) { total++ })
	covered := map[string]bool{}
	for _, tc := range []struct {
		cmd       string
		first     string   // the first flag listed
		has, hasn []string // flags listed, and not
	}{
		{"run", "language", []string{"timeout", "out", "deps", "mount", "mcp-servers"}, []string{"listen", "auth-token-file", "attach", "session-store", "stateless"}},
		{"stdio", "timeout", []string{"attach", "socket", "session-store", "task-ttl"}, []string{"listen", "auth-token-file", "out", "language"}},
		{"serve", "listen", []string{"socket", "auth-token-file", "stateless", "max-conns"}, []string{"attach", "out", "language"}},
		{"warmup", "languages", []string{"deps", "wheelhouse", "runtime-dir", "network"}, []string{"listen", "session-store", "timeout"}},
	} {
		out, code := runArgs(t, tc.cmd, "--help")
		listed := helpFlags(out)
		if code != exitOK || !strings.HasPrefix(out, "Usage: pyrun "+tc.cmd) || len(listed) == 0 || listed[0] != tc.first {
			t.Errorf("pyrun %s --help: exit %d, flags %v; want %d, a usage line, and --%s first:\n%s", tc.cmd, code, listed, exitOK, tc.first, out)
			continue
		}
		seen := map[string]int{}
		for _, name := range listed {
			seen[name]++
			covered[name] = true
		}
		for name, n := range seen {
			if n != 1 {
				t.Errorf("pyrun %s --help lists --%s %d times", tc.cmd, name, n)
			}
		}
		for _, name := range tc.has {
			if seen[name] == 0 {
				t.Errorf("pyrun %s --help does not list --%s", tc.cmd, name)
			}
		}
		for _, name := range tc.hasn {
			if seen[name] != 0 {
				t.Errorf("pyrun %s --help lists --%s, another command's", tc.cmd, name)
			}
		}
		if len(listed) >= total {
			t.Errorf("pyrun %s --help lists %d flags, all of them", tc.cmd, len(listed))
		}
		// Most used first, then the groups, each under its title.
		if !strings.Contains(out, "\nMost used:\n") || !strings.Contains(out, "\nPackages:\n") && tc.cmd != "warmup" {
			t.Errorf("pyrun %s --help has no groups:\n%s", tc.cmd, out)
		}
		if again, _ := runArgs(t, "help", tc.cmd); again != out {
			t.Errorf("pyrun help %s differs from pyrun %s --help", tc.cmd, tc.cmd)
		}
	}
	// Every flag is some command's: none is left out of every help.
	o.flagSet("pyrun").VisitAll(func(f *flag.Flag) {
		if !covered[f.Name] {
			t.Errorf("--%s is in no command's help", f.Name)
		}
	})

	// pyrun --help: the commands and a few flags, on stdout; with no
	// arguments at all, the same on stderr as a usage error.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, strings.NewReader(""), &stdout, &stderr); code != exitOK || stderr.Len() != 0 {
		t.Errorf("pyrun --help: exit %d, stderr %q", code, stderr.String())
	}
	top := stdout.String()
	for _, cmd := range []string{"stdio", "serve", "warmup", "run", "version"} {
		if !strings.Contains(top, "pyrun "+cmd) {
			t.Errorf("pyrun --help does not name pyrun %s:\n%s", cmd, top)
		}
	}
	if n := len(helpFlags(top)); n == 0 || n > 10 || !strings.Contains(top, "pyrun COMMAND --help") {
		t.Errorf("pyrun --help lists %d flags, want a few and where the rest are:\n%s", n, top)
	}
	stdout.Reset()
	if code := run(nil, strings.NewReader(""), &stdout, &stderr); code != exitUsage || stderr.String() != top || stdout.Len() != 0 {
		t.Errorf("pyrun with no arguments: exit %d, stderr %q", code, stderr.String())
	}
}

package main

// docs/configuration.md's tables of flags are generated from the flag set
// itself, so that they cannot drift from it: TestConfigurationPage fails
// when the committed page differs from what configurationTables prints, and
// rewrites it with -update-docs:
//
//	go generate ./cmd/pyrun
//
// The prose around the tables is the page's own: only the part between the
// two markers is generated.

//go:generate go test -short -count=1 -run ^TestConfigurationPage$ . -update-docs

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated part of docs/configuration.md from the flag set")

const (
	configPage  = "../../docs/configuration.md"
	configBegin = "<!-- BEGIN generated flags: `go generate ./cmd/pyrun` writes this part from the flag set (cmd/pyrun/configdoc_test.go); edit the flags' help there, not here -->"
	configEnd   = "<!-- END generated flags -->"
)

// configGroup is one table of the page: the flags a reader looks for
// together, and a link to the page that explains them.
type configGroup struct {
	title, see string
	flags      []string
}

// configGroups places every flag in one table. A flag in none fails
// TestConfigurationPage: add it where a reader would look for it.
var configGroups = []configGroup{
	{"Pool and calls", "[The tool](tool.md), [limits](security.md#limits-no-call-starves-the-others-or-takes-pyrun-down)", []string{
		"workers", "timeout", "memory-limit", "max-output", "max-code", "max-input-files", "max-queue",
		"queue-timeout", "isolation", "client-max-workers", "client-worker-idle", "live-buffer", "progress-interval",
	}},
	{"Packages", "[Packages](packages.md)", []string{"deps", "package-index", "wheelhouse", "pypi"}},
	{"The sandbox and what a worker may hold", "[Security model](security.md)", []string{
		"network", "os-sandbox", "worker-open-files", "worker-file-size", "max-worker-threads", "idle-cpu",
		"idle-memory-slack", "warm-calls", "worker-log-per-call", "worker-log-rate", "runtime-dir",
	}},
	{"Sessions", "[Sessions](sessions.md)", []string{
		"session-idle", "session-max-age", "max-sessions", "client-max-sessions", "session-spares", "session-worker",
		"sessions-per-worker", "max-session-workers", "client-max-session-workers", "instance-id",
		"session-store", "checkpoint-delay", "max-checkpoint", "session-lease", "session-move-wait",
	}},
	{"Rich results and files", "[Rich results](rich-results.md)", []string{
		"max-displays", "max-display-bytes", "output-ttl", "output-store", "output-store-files", "output-dir",
		"mount", "out",
	}},
	{"Languages", "[Languages](languages.md)", []string{
		"languages", "r-workers", "js-workers", "r-memory-limit", "js-memory-limit", "language",
	}},
	{"Code mode", "[Code mode](code-mode.md)", []string{
		"mcp-servers", "max-tool-calls", "tool-concurrency", "max-tool-listing", "max-tool-message",
	}},
	{"The HTTP service", "[Serving over HTTP](operations.md#serving-over-http)", []string{
		"listen", "stateless", "session-timeout", "keep-alive", "drain-timeout",
	}},
	{"Access control", "[Access control](operations.md#access-control-sharing-pyrun)", []string{
		"auth-token-file", "auth-issuer", "auth-audience", "auth-jwks-url", "public-url", "metrics-auth",
		"insecure-no-auth", "client-max-calls", "client-max-queue", "metrics-max-clients",
	}},
	{"What one client can hold", "[What one client can hold](security.md#what-one-client-can-hold)", []string{
		"write-timeout", "session-pending-results", "session-pending-bytes", "client-pending-bytes",
		"max-request-bytes", "client-max-request-bytes", "go-memory-limit", "max-mcp-sessions",
		"client-max-mcp-sessions", "header-timeout", "body-timeout", "max-conns", "max-conns-per-addr",
	}},
	{"The local service", "[One service behind every stdio client](operations.md#one-service-behind-every-stdio-client)", []string{
		"socket", "attach", "max-socket-conns",
	}},
	{"MCP tasks", "[MCP tasks](mcp.md#mcp-tasks)", []string{"task-ttl", "client-max-tasks", "task-after"}},
	{"Logs and the config file", "[The config file](#the-config-file)", []string{"config", "log-level", "log-format"}},
}

// derivedDefaults say in words the defaults the flag set cannot: those
// worked out when pyrun starts (a flag's zero value stands for them) or
// that depend on the machine the page is generated on.
var derivedDefaults = map[string]string{
	"workers":                  "the number of CPUs, at least 2",
	"runtime-dir":              "`~/.cache/pyrun`",
	"max-queue":                "64 per worker",
	"drain-timeout":            "the timeout plus 5s",
	"client-max-calls":         "the pool size",
	"idle-memory-slack":        "a quarter of the memory limit, at least 64MiB",
	"max-request-bytes":        "`64MiB`, or four times client-max-request-bytes if more",
	"client-max-request-bytes": "`16MiB`, or two of the largest request bodies if more",
	"go-memory-limit":          "derived from the other limits ([how](security.md#what-one-client-can-hold))",
	"max-conns":                "1024, fewer under a low open-files limit",
	"instance-id":              "the host name",
	"session-store":            "`dir:` and pyrun's state folder, `$XDG_STATE_HOME/pyrun/sessions` or `~/.local/state/pyrun/sessions`",
	"socket":                   "serve: none; stdio: `$XDG_RUNTIME_DIR/pyrun.sock`, else `/run/user/UID/pyrun.sock`",
	"package-index":            "the CDN of the pinned Pyodide",
	"public-url":               "`http://` and the listen address",
	"auth-audience":            "the resource URLs",
	"auth-jwks-url":            "from the issuer's metadata",
	"output-dir":               "the system's temporary directory",

	"client-max-session-workers": "half of max-session-workers, rounded up",
}

// machineDefaults are the flags whose default the flag set works out from
// the machine it runs on.
var machineDefaults = []string{"workers", "runtime-dir", "session-store"}

// configurationTables writes the generated part of the page: one table per
// group, a row per flag with its config key, its default, whether a reload
// applies it, and its help.
func configurationTables(w io.Writer) error {
	var o options
	fs := o.flagSet("pyrun")
	placed := map[string]bool{}
	for _, g := range configGroups {
		fmt.Fprintf(w, "\n### %s\n\n", g.title)
		fmt.Fprintf(w, "What they do: %s.\n\n", g.see)
		fmt.Fprintln(w, "| flag | config key | default | reload | |")
		fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
		for _, name := range g.flags {
			f := fs.Lookup(name)
			if f == nil {
				return fmt.Errorf("configGroups names --%s, which is no flag", name)
			}
			if placed[name] {
				return fmt.Errorf("configGroups names --%s twice", name)
			}
			placed[name] = true
			def, err := docDefault(f)
			if err != nil {
				return err
			}
			reload := "yes"
			if slices.Contains(restartOnly, name) {
				reload = "at start"
			}
			arg, help := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "| `--%s` | `%s` | %s | %s | %s |\n",
				strings.TrimSpace(name+" "+argName(f, arg)), configKey(name), cell(def), reload, cell(help))
		}
	}
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if !placed[f.Name] {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("flags in no group of configGroups (cmd/pyrun/configdoc_test.go): %s; add each where a reader would look for it", strings.Join(missing, ", "))
	}
	return nil
}

// docDefault is a flag's default as the page gives it.
func docDefault(f *flag.Flag) (string, error) {
	if d, ok := derivedDefaults[f.Name]; ok {
		// A derived default is written in words only while the flag set
		// cannot give it: a flag that gains a default of its own drops it.
		if !slices.Contains(machineDefaults, f.Name) && !slices.Contains([]string{"", "0", "0s"}, f.DefValue) {
			return "", fmt.Errorf("--%s now defaults to %q: drop it from derivedDefaults", f.Name, f.DefValue)
		}
		return d, nil
	}
	if f.DefValue == "" {
		return "none", nil
	}
	def := f.DefValue
	if d, err := time.ParseDuration(def); err == nil {
		// Go writes an hour 1h0m0s; the page, as a config file may, 1h.
		def = d.String()
		if strings.HasSuffix(def, "m0s") {
			def = strings.TrimSuffix(def, "0s")
		}
		if strings.HasSuffix(def, "h0m") {
			def = strings.TrimSuffix(def, "0m")
		}
	}
	return "`" + def + "`", nil
}

// argName is the name of a flag's argument in the table: the one its help
// gives in backquotes, else one for its type.
func argName(f *flag.Flag, name string) string {
	switch f.Value.(type) {
	case *byteSize:
		return "BYTES"
	case *stringList:
		return "a,b"
	}
	switch name {
	case "int":
		return "N"
	case "float":
		return "SHARE"
	case "duration":
		return "DURATION"
	case "string", "value":
		return "VALUE"
	}
	return strings.ToUpper(name)
}

// cell makes s safe inside a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// TestConfigurationPage fails when docs/configuration.md's tables differ
// from the flag set; -update-docs (go generate ./cmd/pyrun) rewrites them.
func TestConfigurationPage(t *testing.T) {
	page, err := os.ReadFile(configPage)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(page, []byte(configBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(configEnd))
	if !ok || !ok2 {
		t.Fatalf("%s has lost its markers %q and %q, between which the flags' tables go", configPage, configBegin, configEnd)
	}
	var tables bytes.Buffer
	if err := configurationTables(&tables); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(before, []byte(configBegin+"\n"), tables.Bytes(), []byte("\n"+configEnd), after)
	if bytes.Equal(page, want) {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(configPage, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", configPage)
		return
	}
	t.Errorf("%s does not match the flags: run `go generate ./cmd/pyrun` and commit the page. First difference:\n%s", configPage, firstDifference(page, want))
}

// firstDifference shows the first line where got and want part.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d\n  page: %s\n  want: %s", i+1, gl, wl)
		}
	}
	return "(none)"
}

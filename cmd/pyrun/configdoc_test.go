package main

// docs/configuration.md's tables of flags and configs/pyrun.json, the
// example config, are generated from the flag set and its table
// (flagrows.go), so that they cannot drift from it: TestConfigurationPage
// and TestExampleConfig fail when the committed files differ from what
// configurationTables and exampleConfig write, and rewrite them with
// -update-docs:
//
//	go generate ./cmd/pyrun
//
// The prose around the tables is the page's own: only the part between the
// two markers is generated.

//go:generate go test -short -count=1 -run ^(TestConfigurationPage|TestExampleConfig)$ . -update-docs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated part of docs/configuration.md from the flag set")

const (
	configPage  = "../../docs/configuration.md"
	configBegin = "<!-- BEGIN generated flags: `go generate ./cmd/pyrun` writes this part from the flag set (cmd/pyrun/configdoc_test.go); edit the flags' help there, not here -->"
	configEnd   = "<!-- END generated flags -->"
)

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
		for _, r := range g.rows {
			name := r.name
			f := fs.Lookup(name)
			if f == nil {
				return fmt.Errorf("configGroups names --%s, which is no flag", name)
			}
			if placed[name] {
				return fmt.Errorf("configGroups names --%s twice", name)
			}
			placed[name] = true
			def, err := docDefault(f, r)
			if err != nil {
				return err
			}
			reload := "yes"
			if r.restart {
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
func docDefault(f *flag.Flag, r flagRow) (string, error) {
	if r.derived != "" {
		// A derived default is written in words only while the flag set
		// cannot give it: a flag that gains a default of its own drops it.
		if !r.machine && !slices.Contains([]string{"", "0", "0s"}, f.DefValue) {
			return "", fmt.Errorf("--%s now defaults to %q: drop its row's derived", f.Name, f.DefValue)
		}
		return r.derived, nil
	}
	if f.DefValue == "" {
		return "none", nil
	}
	return "`" + tidyDefault(f.DefValue) + "`", nil
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

const examplePath = "../../configs/pyrun.json"

// exampleHead is the example config's first comment.
const exampleHead = "pyrun's config file: pyrun serve --config pyrun.json (any command takes it). Every key is a flag's name in snake_case with the flag's syntax, shown here at its default; a flag on the command line wins over the file. Keys that start with // are comments. pyrun serve re-reads the file when it changes: pool size, limits, log level and packages apply at once, without disturbing running calls; keys marked 'at start' need a restart. A file that does not parse or check is rejected with a logged error, and the settings in force stay."

// exampleConfig writes configs/pyrun.json: every key with its note, at its
// default, a group to a paragraph.
func exampleConfig(w io.Writer) error {
	var o options
	fs := o.flagSet("pyrun")
	var lines []string
	add := func(key string, raw []byte) {
		lines = append(lines, fmt.Sprintf("  %s: %s", jsonText(key), raw))
	}
	add("//", jsonText(exampleHead))
	for _, g := range configGroups {
		lines = append(lines, "")
		for _, r := range g.rows {
			if r.note == "" {
				continue // --config: the file itself
			}
			f := fs.Lookup(r.name)
			if f == nil {
				return fmt.Errorf("configGroups names --%s, which is no flag", r.name)
			}
			note := r.note
			if r.restart {
				// "serve: ..." becomes "serve, at start: ...".
				if cmd, rest, ok := strings.Cut(note, ": "); ok && slices.Contains(forAll, cmd) {
					note = cmd + ", at start: " + rest
				} else {
					note = "at start: " + note
				}
			}
			key := configKey(r.name)
			add("//"+key, jsonText(note))
			v, err := exampleValue(f, r)
			if err != nil {
				return err
			}
			add(key, v)
		}
	}
	_, err := fmt.Fprintf(w, "{\n%s\n}\n", strings.ReplaceAll(strings.Join(lines, ",\n"), ",\n,\n", ",\n\n"))
	return err
}

// exampleValue is flag f's value in the example config, as JSON: r's
// example, else its default in the type the file takes.
func exampleValue(f *flag.Flag, r flagRow) ([]byte, error) {
	if r.example != "" {
		return []byte(r.example), nil
	}
	def := f.DefValue
	if r.machine {
		def = "" // the default a machine works out: the key left empty
	}
	switch f.Value.(type) {
	case *stringList, mountsVar:
		list := []string{}
		if def != "" {
			list = strings.Split(def, ",")
		}
		return json.Marshal(list)
	case *serversFlag:
		return []byte("{}"), nil
	case *durationFlag:
		return jsonText(tidyDefault(def)), nil
	}
	if _, ok := f.Value.(interface{ Bytes() int64 }); ok {
		return jsonText(def), nil
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil, fmt.Errorf("--%s: no JSON type for a %T", f.Name, f.Value)
	}
	switch g.Get().(type) {
	case bool, int, int64, uint, uint64, float64:
		if def == "" {
			def = "0"
		}
		return []byte(def), nil
	}
	return jsonText(def), nil
}

// jsonText is s as a JSON string, with <, > and & as they are.
func jsonText(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

package supervisor

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The worker programs' side of the pipe protocol is typed once, in
// pyodide-host/protocol.ts (docs/protocol.md). These tests read that file,
// needing no runtime, and hold it and this package to one version and one
// set of messages: a field one side sends and the other does not know
// would be dropped without a word.

const protocolTS = "../pyodide-host/protocol.ts"

// tsSource is protocol.ts without its comments, which name fields in prose.
func tsSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(protocolTS)
	if err != nil {
		t.Fatal(err)
	}
	src := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(b), "")
	return regexp.MustCompile(`//[^\n]*`).ReplaceAllString(src, "")
}

// tsBlock is the text of the declaration that starts with head, up to the
// line at its indentation that ends it ("}", "  };" or "  | ...;").
func tsBlock(t *testing.T, src, head string) string {
	t.Helper()
	i := strings.Index(src, head)
	if i < 0 {
		t.Fatalf("%s has no %q", protocolTS, head)
	}
	rest := src[i:]
	end := regexp.MustCompile(`(?m)^(}|  };|  \| [^\n]*;)$`).FindStringIndex(rest)
	if end == nil {
		t.Fatalf("%s: no end of %q", protocolTS, head)
	}
	return rest[:end[1]]
}

// tsFields are the field names declared in blocks: "name:" or "name?:".
func tsFields(blocks ...string) []string {
	var names []string
	for _, b := range blocks {
		for _, m := range regexp.MustCompile(`(?m)(?:^|[{;]|\s)(\w+)\??:`).FindAllStringSubmatch(b, -1) {
			names = append(names, m[1])
		}
	}
	return sorted(names)
}

// jsonFields are the JSON names of v's fields, its embedded structs' included.
func jsonFields(v any) []string {
	var names []string
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for f := range ty.Fields() {
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names = append(names, name)
			}
		}
	}
	walk(reflect.TypeOf(v))
	return sorted(names)
}

func sorted(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

func TestProtocolVersionMatchesTypeScript(t *testing.T) {
	m := regexp.MustCompile(`(?m)^export const PROTOCOL_VERSION = (\d+);$`).FindStringSubmatch(tsSource(t))
	if m == nil {
		t.Fatalf("%s declares no PROTOCOL_VERSION", protocolTS)
	}
	if v, _ := strconv.Atoi(m[1]); v != protocolVersion {
		t.Errorf("%s speaks protocol %d, the supervisor %d", protocolTS, v, protocolVersion)
	}
	// docs/protocol.md states the version the code speaks, in its title
	// and in every ready event it shows.
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "# The worker pipe protocol, version " + strconv.Itoa(protocolVersion) + "\n"
	if !strings.HasPrefix(string(doc), want) {
		t.Errorf("docs/protocol.md does not start with %q", want)
	}
	for _, m := range regexp.MustCompile(`"type":"ready","protocol":(\d+)`).FindAllStringSubmatch(string(doc), -1) {
		if m[1] != strconv.Itoa(protocolVersion) {
			t.Errorf("docs/protocol.md shows a ready event of protocol %s", m[1])
		}
	}
}

// eventTypes are the events parseEvent accepts.
var eventTypes = []string{"checkpoint", "display", "error", "file", "idle", "need", "output", "package", "parked", "pong", "ready", "result", "tool_call"}

func TestProtocolMessagesMatchTypeScript(t *testing.T) {
	src := tsSource(t)
	events := tsBlock(t, src, "export type Event =") + tsBlock(t, src, "export interface Result {")
	var types []string
	for _, m := range regexp.MustCompile(`type: "(\w+)"`).FindAllStringSubmatch(events, -1) {
		types = append(types, m[1])
	}
	if got := sorted(types); !slices.Equal(got, eventTypes) {
		t.Errorf("protocol.ts's events are %v, the supervisor's %v", got, eventTypes)
	}
	for _, ty := range eventTypes {
		if _, err := parseEvent([]byte(`{"type":"` + ty + `"}`)); err != nil && strings.Contains(err.Error(), "unknown event type") {
			t.Errorf("parseEvent does not know %q", ty)
		}
	}
	for _, tc := range []struct {
		what       string
		ts, goSide []string
	}{
		{"event fields", tsFields(events), jsonFields(event{})},
		{
			"request fields",
			tsFields(tsBlock(t, src, "export type Request ="), tsBlock(t, src, "export interface RunRequest {")),
			sorted(append(jsonFields(request{}), jsonFields(warmRequest{})...)),
		},
		{
			"HostConfig fields",
			tsFields(tsBlock(t, src, "export interface EngineConfig {"), tsBlock(t, src, "export interface HostConfig")),
			jsonFields(hostConfig{}),
		},
		{
			"a restore's fields (HostConfig restore, the restore line)",
			tsFields(tsBlock(t, src, "export interface Restore {"), tsBlock(t, src, "export interface RestoredSums {")),
			sorted(append(jsonFields(restoreSpec{}), jsonFields(restoredSums{})...)),
		},
	} {
		if !slices.Equal(tc.ts, tc.goSide) {
			t.Errorf("%s differ:\n protocol.ts: %v\n supervisor:  %v", tc.what, tc.ts, tc.goSide)
		}
	}
}

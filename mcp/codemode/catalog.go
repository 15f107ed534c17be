package codemode

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The catalog is what pyodide-host/python/mcp_tools.py builds its namespaces
// from: {"servers": [{"name", "note", "tools": [{"name", "description",
// "inputSchema"}]}]}, servers and tools sorted by name.
type catalogServer struct {
	Name  string        `json:"name"`
	Note  string        `json:"note,omitempty"`
	Tools []catalogTool `json:"tools"`
}

type catalogTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Pending marks a tool its server has not listed yet (it is
	// connecting): its function takes any keyword arguments.
	Pending bool `json:"pending,omitempty"`
}

// Catalog is the JSON the code's mcp_tools module is built from. A server
// that is down keeps the tools it offered last (their calls fail with why),
// and says so in its note.
func (h *Hub) Catalog() json.RawMessage {
	h.mu.RLock()
	c := h.catalog
	h.mu.RUnlock()
	if c != nil {
		return c
	}
	var servers []catalogServer
	for _, u := range h.sorted() {
		cs := catalogServer{Name: u.name, Tools: []catalogTool{}}
		if st := u.status(); st != "" {
			cs.Note = "This server is " + cleanText(st, maxNote) + "."
		}
		for _, t := range u.toolList() {
			cs.Tools = append(cs.Tools, catalogTool{Name: t.sdk.Name, Description: cleanText(t.sdk.Description, maxToolDoc),
				InputSchema: t.schema, Pending: t.pending})
		}
		servers = append(servers, cs)
	}
	b, err := json.Marshal(map[string]any{"servers": servers})
	if err != nil {
		// Every part came from JSON; this cannot happen.
		b = []byte(`{"servers":[]}`)
	}
	h.mu.Lock()
	h.catalog = b
	h.mu.Unlock()
	return b
}

// Describe is the part of run_python_code's description that tells a model
// about the tools: how to call them, and their Python signatures with
// one-line summaries, within Options.MaxListing (a longer list is
// summarised; help() in Python shows the rest). "" without servers.
func (h *Hub) Describe() string {
	if h == nil {
		return ""
	}
	servers := h.sorted()
	if len(servers) == 0 {
		return ""
	}
	opts := h.options()
	head := fmt.Sprintf(`
Code mode: the code can call the tools of other MCP servers through the module mcp_tools, one namespace per server and one async function per tool, with keyword arguments: `+"`import mcp_tools; graph = await mcp_tools.memory.read_graph()`"+`. Call several tools in one program, combine and filter their results in Python, and return only what is needed; asyncio.gather runs up to %d calls at once. A function returns the tool's structured content, else its text (JSON-decoded when it parses), an mcp_tools.Image for an image; a failure raises mcp_tools.ToolError. At most %d tool calls per run. help(mcp_tools.<server>) shows each function's full signature and docstring.
Available functions:`, opts.Concurrency, opts.MaxCalls)
	// Three levels of detail; the richest that fits is used. What the
	// servers wrote (descriptions, enum values and defaults in schemas, the
	// errors in notes) is cleaned: it reaches the model as pyrun's words.
	for level := 0; level < 3; level++ {
		var b strings.Builder
		for _, u := range servers {
			listServer(&b, u, level)
		}
		body := cleanText(b.String(), len(b.String()))
		if len(body) <= opts.MaxListing || level == 2 {
			if len(body) > opts.MaxListing {
				body = cut(body, opts.MaxListing) + "\n(more servers; dir(mcp_tools) lists them)"
			}
			return head + body
		}
	}
	return head
}

// maxToolDoc bounds a tool's description in the catalog, where its
// function's docstring comes from (help() in Python).
const maxToolDoc = 4 << 10

// maxLiteral bounds an enum value or a default in a signature.
const maxLiteral = 64

// maxNote bounds what a server's state says (its last error, say).
const maxNote = 300

// cleanText is text a server wrote, made fit to show a model or a
// terminal: control characters other than newline and tab, and format
// characters (bidirectional overrides and isolates, zero-width ones) are
// dropped, bytes that are not UTF-8 become U+FFFD, and it is cut at max
// bytes with "...".
func cleanText(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if (unicode.IsControl(r) && r != '\n' && r != '\t') || unicode.Is(unicode.Cf, r) {
			continue
		}
		b.WriteRune(r)
		if b.Len() > max {
			break
		}
	}
	out := b.String()
	if len(out) > max {
		out = cut(out, max-3) + "..."
	}
	return out
}

func listServer(b *strings.Builder, u *upstream, level int) {
	tools := u.toolList()
	note := ""
	if st := u.status(); st != "" {
		note = " (" + cleanText(st, maxNote) + ")"
	}
	ns := pyName(u.name)
	switch level {
	case 0:
		fmt.Fprintf(b, "\nmcp_tools.%s%s:", ns, note)
		if len(tools) == 0 {
			b.WriteString(" no tools allowed or offered")
		}
		for _, t := range tools {
			if t.pending {
				fmt.Fprintf(b, "\n  async def %s(**arguments)", pyName(t.sdk.Name))
				continue
			}
			fmt.Fprintf(b, "\n  async def %s(%s)", pyName(t.sdk.Name), signature(t.schema))
			if s := summary(t.sdk.Description); s != "" {
				b.WriteString(": " + s)
			}
		}
	case 1:
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = pyName(t.sdk.Name)
		}
		fmt.Fprintf(b, "\nmcp_tools.%s%s: %s", ns, note, strings.Join(names, ", "))
	default:
		fmt.Fprintf(b, "\nmcp_tools.%s%s: %d functions", ns, note, len(tools))
	}
}

var nonWord = regexp.MustCompile(`\W`)

// pyName is the Python name mcp_tools.py gives an MCP name (_pyname there),
// leaving out its suffixes for names that collide.
func pyName(name string) string {
	py := nonWord.ReplaceAllString(name, "_")
	if py == "" {
		return "_"
	}
	if py[0] >= '0' && py[0] <= '9' {
		py = "_" + py
	}
	if slices.Contains(pythonKeywords, py) {
		py += "_"
	}
	return py
}

var pythonKeywords = strings.Fields(`False None True and as assert async await break class continue def del
elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield`)

// signature renders a tool's parameters as mcp_tools.py does: keyword-only,
// required ones first, optional ones with their default or None.
func signature(schema json.RawMessage) string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.SortStableFunc(names, func(a, b string) int {
		ra, rb := slices.Contains(s.Required, a), slices.Contains(s.Required, b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := []string{"*"}
	extra := false
	for _, n := range names {
		if nonWord.MatchString(n) || n == "" || (n[0] >= '0' && n[0] <= '9') || slices.Contains(pythonKeywords, n) {
			extra = true
			continue
		}
		var p map[string]any
		_ = json.Unmarshal(s.Properties[n], &p)
		part := n + ": " + pyType(p, 0)
		if !slices.Contains(s.Required, n) {
			if d, ok := p["default"]; ok {
				part += " = " + pyLiteral(d)
			} else {
				part += " = None"
			}
		}
		parts = append(parts, part)
	}
	if extra {
		parts = append(parts, "**arguments")
	}
	return strings.Join(parts, ", ")
}

func pyType(p map[string]any, depth int) string {
	if p == nil || depth > 3 {
		return "Any"
	}
	if e, ok := p["enum"].([]any); ok && len(e) > 0 {
		lits := make([]string, len(e))
		for i, v := range e {
			lits[i] = pyLiteral(v)
		}
		return "Literal[" + strings.Join(lits, ", ") + "]"
	}
	switch t := p["type"].(type) {
	case string:
		switch t {
		case "string":
			return "str"
		case "integer":
			return "int"
		case "number":
			return "float"
		case "boolean":
			return "bool"
		case "null":
			return "None"
		case "object":
			return "dict"
		case "array":
			if items, ok := p["items"].(map[string]any); ok {
				return "list[" + pyType(items, depth+1) + "]"
			}
			return "list"
		}
	case []any:
		var alts []string
		for _, x := range t {
			q := map[string]any{}
			for k, v := range p {
				q[k] = v
			}
			q["type"] = x
			alts = append(alts, pyType(q, depth+1))
		}
		return strings.Join(alts, " | ")
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := p[key].([]any); ok && len(alts) > 0 {
			var out []string
			for _, a := range alts {
				m, _ := a.(map[string]any)
				if s := pyType(m, depth+1); !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			return strings.Join(out, " | ")
		}
	}
	return "Any"
}

func pyLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		b, _ := json.Marshal(cleanText(v, maxLiteral))
		return "'" + strings.ReplaceAll(strings.Trim(string(b), `"`), "'", `\'`) + "'"
	}
	b, _ := json.Marshal(v)
	return cleanText(string(b), maxLiteral)
}

// summary is a description's first sentence, at most 120 bytes.
func summary(desc string) string {
	desc = strings.Join(strings.Fields(cleanText(desc, len(desc))), " ")
	if i := strings.Index(desc, ". "); i >= 0 {
		desc = desc[:i+1]
	}
	if len(desc) > 120 {
		desc = cut(desc, 117) + "..."
	}
	return desc
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

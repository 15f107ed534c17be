package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every run tool's structuredContent is valid under the outputSchema the
// tool lists (issue 39 item 3): checked with the go-sdk client's tools/list
// and the schema library the SDK uses, over the kinds of result a client
// meets (a value, an error, a timeout, a session, displays, /output/
// files) and another language's tool. A control document that breaks the
// schema must fail it, so that the check is not vacuous.
func TestStructuredContentMatchesOutputSchema(t *testing.T) {
	s := newServer(t, "--workers", "1", "--languages", "python,javascript")
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	tools, err := s.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		if tool.OutputSchema == nil {
			t.Errorf("tool %s lists no outputSchema", tool.Name)
			continue
		}
		b, _ := json.Marshal(tool.OutputSchema)
		var sc jsonschema.Schema
		if err := json.Unmarshal(b, &sc); err != nil {
			t.Fatalf("%s's outputSchema: %v", tool.Name, err)
		}
		r, err := sc.Resolve(nil)
		if err != nil {
			t.Fatalf("%s's outputSchema does not resolve: %v", tool.Name, err)
		}
		schemas[tool.Name] = r
	}
	py := schemas["run_python_code"]
	if py == nil || schemas["run_javascript_code"] == nil {
		t.Fatalf("tools listed: %v, want run_python_code and run_javascript_code with schemas", schemas)
	}
	if err := py.Validate(map[string]any{"status": "bogus"}); err == nil {
		t.Fatal("control: a structuredContent without its required members and with an unknown status passed the schema")
	}

	check := func(what, tool string, args map[string]any) map[string]any {
		t.Helper()
		res, err := s.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil || doc == nil {
			t.Fatalf("%s: no structuredContent object: %s", what, b)
		}
		if err := schemas[tool].Validate(doc); err != nil {
			t.Errorf("%s: structuredContent %s breaks %s's outputSchema: %v", what, b, tool, err)
		}
		return doc
	}
	check("a value", "run_python_code", map[string]any{"python_code": "print('hi')\n{'a': [1, 2]}"})
	check("an error", "run_python_code", map[string]any{"python_code": "1/0"})
	if doc := check("a timeout", "run_python_code", map[string]any{"python_code": "while True: pass", "timeout_seconds": 0.5}); doc["status"] != "timeout" {
		t.Errorf("a timeout: status %v", doc["status"])
	}
	doc := check("a session's first call", "run_python_code", map[string]any{"python_code": "x = 1", "session_id": "new"})
	id, _ := doc["session_id"].(string)
	if id == "" {
		t.Fatalf("a session's first call gave no session_id: %v", doc)
	}
	check("a session's last call", "run_python_code", map[string]any{"python_code": "x", "session_id": id, "end_session": true})
	if doc := check("displays and files", "run_python_code", map[string]any{"python_code": pngPy + `
class Html:
    def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
display(Html())
open("/output/report.txt", "w").write("hello")
`}); doc["displays"] == nil || doc["files"] == nil {
		t.Errorf("displays and files: %v, want both listed", doc)
	}
	check("JavaScript", "run_javascript_code", map[string]any{"javascript_code": "console.log('hi'); 1 + 1"})
}

package argtext_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/pyrun/pyrun/mcp/argtext"
)

// A schema like those MCP servers give their tools (the memory server's
// create_entities, with a few more keywords).
const schema = `{
  "type": "object",
  "properties": {
    "entities": {"type": "array", "maxItems": 2, "items": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1},
        "entityType": {"type": "string", "enum": ["person", "place"]},
        "observations": {"type": "array", "items": {"type": "string"}}
      },
      "required": ["name", "entityType"],
      "additionalProperties": false
    }},
    "x": {"type": "integer", "minimum": 1, "exclusiveMaximum": 100, "description": "the number to double"},
    "mode": {"const": "fast"},
    "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "tags": {"type": "object", "additionalProperties": {"type": "string"}}
  },
  "required": ["x"],
  "additionalProperties": false
}`

// TestExplain: each fault is named by where it is and the rule it breaks;
// a fault in a keyword argtext does not know is left to the validator.
func TestExplain(t *testing.T) {
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatal(err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ args, want string }{
		{`[1]`, "the arguments must be an object of named arguments, not an array"},
		{`{}`, "x is missing (the number to double)"},
		{`{"x": 2, "X2": 1}`, `there is no argument "X2"; the arguments are either, entities, mode, tags, x`},
		{`{"x": 2, "Entities": []}`, `there is no argument "Entities" (did you mean entities?)`},
		{`{"x": "many"}`, `x must be an integer, not a string ("many")`},
		{`{"x": 2.5}`, "x must be an integer, not a number (2.5)"},
		{`{"x": 0}`, "x must be at least 1, not 0"},
		{`{"x": 100}`, "x must be less than 100, not 100"},
		{`{"x": 2, "mode": "slow"}`, `mode must be "fast", not a string ("slow")`},
		{`{"x": 2, "entities": [{"name": "Bob", "observations": []}]}`, `entities[0] lacks its "entityType"`},
		{`{"x": 2, "entities": [{"name": 5, "entityType": "person"}]}`, "entities[0].name must be a string, not a number (5)"},
		{`{"x": 2, "entities": [{"name": "", "entityType": "person"}]}`, "entities[0].name must not be empty"},
		{`{"x": 2, "entities": [{"name": "A", "entityType": "thing"}]}`, `entities[0].entityType must be one of "person", "place", not a string ("thing")`},
		{`{"x": 2, "entities": [{"name": "A", "entityType": "place", "age": 3}]}`, `entities[0] may not hold "age"`},
		{`{"x": 2, "entities": [{"name": "A", "entityType": "place", "observations": [1]}]}`, "entities[0].observations[0] must be a string, not a number (1)"},
		{`{"x": 2, "entities": [{}, {}, {}]}`, "entities must hold at most 2 items, not 3"},
		{`{"x": 2, "tags": {"a": 1}}`, `tags["a"] must be a string, not a number (1)`},
		{`{"x": 2, "either": true}`, ""}, // anyOf: the validator's words
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.args), &v); err != nil {
			t.Fatal(err)
		}
		if resolved.Validate(v) == nil {
			t.Errorf("%s: the validator accepts it", tc.args)
			continue
		}
		got := argtext.Explain(v, &s)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: %v, want nil (a keyword argtext does not know)", tc.args, got)
		case tc.want != "" && (got == nil || !strings.HasPrefix(got.Error(), tc.want)):
			t.Errorf("%s:\n got %v\nwant %s", tc.args, got, tc.want)
		}
	}
}

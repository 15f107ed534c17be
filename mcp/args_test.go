package mcp

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestParseArgsFastPathAgreesWithSchema checks that the decoder for plainly
// valid arguments accepts nothing the schema refuses and decodes what it
// accepts as the checked path does.
func TestParseArgsFastPathAgreesWithSchema(t *testing.T) {
	for _, raw := range []string{
		// valid
		`{"python_code":"print(1)"}`,
		`{"python_code":""}`,
		`{ "python_code" : "x = 1\n\"q\"" , "global_variables" : {"a": [1, {"b": null}]} }`,
		`{"python_code":"1","global_variables":{}}`,
		`{"python_code":"1","timeout_seconds":2.5}`,
		`{"python_code":"1","timeout_seconds":1e-3,"global_variables":{"x":"y"}}`,
		`{"python_code":"\u00e9\ud83d\ude00"}`,
		// invalid
		``,
		`null`,
		`[]`,
		`"print(1)"`,
		`{}`,
		`{"python_code":null}`,
		`{"python_code":1}`,
		`{"python_code":["a"]}`,
		`{"python_code":"1","bogus":1}`,
		`{"Python_Code":"1"}`,
		`{"python_code":"1","global_variables":null}`,
		`{"python_code":"1","global_variables":[1]}`,
		`{"python_code":"1","global_variables":"x=1"}`,
		`{"python_code":"1","timeout_seconds":0}`,
		`{"python_code":"1","timeout_seconds":-1}`,
		`{"python_code":"1","timeout_seconds":"2"}`,
		`{"python_code":"1","timeout_seconds":null}`,
		`{"python_code":"1","timeout_seconds":1e999}`,
		`{"python_code":"1"`,
		`{"python_code":"1"} trailing`,
	} {
		fast, ok := parseValidArgs(json.RawMessage(raw))
		checked, err := parseArgsChecked(json.RawMessage(raw))
		switch {
		case ok && err != nil:
			t.Errorf("%s: the fast path accepts what the schema refuses: %v", raw, err)
		case ok && !reflect.DeepEqual(normalize(fast), normalize(checked)):
			t.Errorf("%s: the fast path decodes %+v, the checked path %+v", raw, fast, checked)
		case !ok && err == nil:
			t.Errorf("%s: valid arguments missed the fast path", raw)
		}
	}
}

func normalize(a toolArgs) toolArgs {
	if a.GlobalVariables != nil {
		var v any
		_ = json.Unmarshal(a.GlobalVariables, &v)
		b, _ := json.Marshal(v)
		a.GlobalVariables = b
	}
	return a
}

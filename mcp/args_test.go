package mcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// parseArgs is parseArgsFor for run_python_code.
func parseArgs(raw json.RawMessage, maxCode int) (toolArgs, error) {
	return parseArgsFor(raw, maxCode, pythonTool)
}

// parseArgsChecked is parseArgsCheckedFor for run_python_code: the
// arguments validated against its inputSchema, then decoded.
func parseArgsChecked(raw json.RawMessage) (toolArgs, error) {
	return parseArgsCheckedFor(raw, pythonTool)
}

// parseValidArgs is parseValidArgsFor for run_python_code.
func parseValidArgs(raw json.RawMessage) (toolArgs, bool) {
	return parseValidArgsFor(raw, Python.CodeArg, true)
}

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

// TestArgErrorsArePlain: a refused argument is named with the rule it
// breaks in a sentence, not in the schema validator's terms
// ("exclusiveMinimum: -1/1 is less than or equal to 0.000000").
func TestArgErrorsArePlain(t *testing.T) {
	r := &languageTool{lang: Language{Name: "r", Title: "R", Tool: "run_r_code", CodeArg: "r_code"}}
	var err error
	if r.resolved, err = inputSchemaFor(r.lang).Resolve(nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool *languageTool
		raw  string
		want string
	}{
		{pythonTool, `{"python_code":"1","timeout_seconds":-1}`, "timeout_seconds must be greater than 0, not -1"},
		{pythonTool, `{"python_code":"1","timeout_seconds":0}`, "timeout_seconds must be greater than 0, not 0"},
		{pythonTool, `{"python_code":"1","timeout_seconds":"2"}`, `timeout_seconds must be a number, not a string ("2")`},
		{pythonTool, `{"python_code":"1","timeout_seconds":null}`, "timeout_seconds must be a number, not null"},
		{pythonTool, `{"python_code":"1","timeout_seconds":1e999}`, "timeout_seconds holds the number 1e999, past the range of numbers pyrun reads"},
		{pythonTool, `{}`, "python_code is missing (Python code to run)"},
		{pythonTool, `[]`, `the arguments must be an object of named arguments, such as {"python_code": "..."}, not an array`},
		{pythonTool, `{"python_code":1}`, "python_code must be a string, not a number (1)"},
		{pythonTool, `{"python_code":"1","global_variables":[1]}`, "global_variables must be an object, not an array"},
		{pythonTool, `{"python_code":"1","session_id":""}`, "session_id must not be empty"},
		{pythonTool, `{"python_code":"1","session_id":"` + strings.Repeat("s", maxSessionID+1) + `"}`, fmt.Sprintf("session_id must be at most %d characters long, not %d", maxSessionID, maxSessionID+1)},
		{pythonTool, `{"python_code":"1","end_session":"yes"}`, `end_session must be true or false, not a string ("yes")`},
		{pythonTool, `{"python_code":"1","files":[]}`, "files must be an object, not an array"},
		{pythonTool, `{"python_code":"1","timeoutSeconds":3}`, `run_python_code has no argument "timeoutSeconds" (did you mean timeout_seconds?); it takes python_code, end_session, files, global_variables, session_id, timeout_seconds`},
		{r, `{"r_code":"1","global_variables":{}}`, `run_r_code has no argument "global_variables"; it takes r_code, end_session, files, session_id, timeout_seconds`},
		{r, `{"python_code":"1"}`, `run_r_code has no argument "python_code"`},
		{r, `{"timeout_seconds":5}`, "r_code is missing (R code to run)"},
	} {
		_, err := parseArgsFor(json.RawMessage(tc.raw), 1<<20, tc.tool)
		if err == nil || !strings.HasPrefix(err.Error(), "invalid arguments: "+tc.want) {
			t.Errorf("%s: %v\n want invalid arguments: %s", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "validating") {
			t.Errorf("%s: %v: the validator's words", tc.raw, err)
		}
	}
}

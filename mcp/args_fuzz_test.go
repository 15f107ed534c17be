package mcp

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// Tool arguments come from whoever talks to the model: parseArgs must turn
// anything into either checked arguments or an error that names what is
// wrong, without panicking. The seeds run in every test run; `go test -fuzz
// FuzzParseArgs ./mcp/` explores further.

const fuzzMaxCode = 1 << 10

var argSeeds = []string{
	`{"python_code":"print(1)"}`,
	`{"python_code":"1","global_variables":{"a":1,"b":[1,2]},"timeout_seconds":2.5}`,
	`{"python_code":"1","global_variables":{}}`,
	`{"python_code":"1","global_variables":null}`,
	`{"python_code":"1","global_variables":[1]}`,
	`{"python_code":"1","global_variables":"x"}`,
	`{"python_code":"1","timeout_seconds":0}`,
	`{"python_code":"1","timeout_seconds":-1}`,
	`{"python_code":"1","timeout_seconds":1e309}`,
	`{"python_code":"1","timeout_seconds":"5"}`,
	`{"python_code":"1","timeout_seconds":1e300}`,
	`{"python_code":null}`,
	`{"python_code":123}`,
	`{"python_code":"1","bogus":true}`,
	`{"python_code":"1","python_code":"2"}`,
	`{"python_code":"` + strings.Repeat("x", fuzzMaxCode+1) + `"}`,
	`{"python_code":"1","global_variables":{"big":"` + strings.Repeat("y", fuzzMaxCode) + `"}}`,
	`{"python_code":"\ud800"}`,
	`{"python_code":"1","timeout_seconds":"` + strings.Repeat("9", 5000) + `"}`,
	`{"python_code":"1","files":{"a.txt":"x","d/b.bin":{"base64":"AAE="}}}`,
	`{"python_code":"1","files":{"../a":"x"}}`,
	`{"python_code":"1","files":{"/etc/a":"x"}}`,
	`{"python_code":"1","files":{"a":{"base64":"!!"}}}`,
	`{"python_code":"1","files":{"a":7}}`,
	`{"python_code":"1","files":{"a":"x","a/b":"y"}}`,
	`{"python_code":"1","files":{"big":"` + strings.Repeat("z", fuzzMaxCode+1) + `"}}`,
	`{"python_code":"1","files":null}`,
	`{}`,
	`[]`,
	`null`,
	``,
	`"python_code"`,
	`{"python_code":"1"`,
	"\xff\xfe",
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range argSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := parseArgs(raw, fuzzMaxCode)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "invalid arguments: ") {
				t.Errorf("error %q does not say the arguments are invalid", msg)
			}
			if len(msg) > 2000 {
				t.Errorf("error is %d bytes long: it echoes the input", len(msg))
			}
			return
		}
		if len(args.PythonCode) > fuzzMaxCode || len(args.GlobalVariables) > fuzzMaxCode {
			t.Errorf("accepted %d bytes of code, %d of globals; the limit is %d", len(args.PythonCode), len(args.GlobalVariables), fuzzMaxCode)
		}
		if g := bytes.TrimSpace(args.GlobalVariables); len(g) > 0 {
			var obj map[string]any
			if err := json.Unmarshal(g, &obj); err != nil || obj == nil {
				t.Errorf("accepted global_variables %q, not an object", g)
			}
		}
		if ts := args.TimeoutSeconds; ts != nil && (math.IsNaN(*ts) || math.IsInf(*ts, 0) || *ts <= 0) {
			t.Errorf("accepted timeout_seconds %v", *ts)
		}
		files, err := decodeFiles(t.Context(), args.Files, fuzzMaxCode, 0)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "invalid arguments: files") || len(msg) > 2000 {
				t.Errorf("files error %q", msg)
			}
			return
		}
		total := 0
		for _, f := range files {
			total += len(f.Data)
			if err := supervisor.CheckInputPath(f.Path); err != nil {
				t.Errorf("accepted input file %q: %v", f.Path, err)
			}
		}
		if total > fuzzMaxCode {
			t.Errorf("accepted %d bytes of files; the limit is %d", total, fuzzMaxCode)
		}
	})
}

// Each refusal names the argument at fault and, for limits, the limit.
func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{`{}`, []string{"python_code"}},
		{`{"python_code":123}`, []string{"python_code"}},
		{`{"python_code":"1","bogus":true}`, []string{"bogus"}},
		{`{"python_code":"1","global_variables":[1]}`, []string{"global_variables"}},
		{`{"python_code":"1","timeout_seconds":"5"}`, []string{"timeout_seconds"}},
		{`{"python_code":"1","timeout_seconds":0}`, []string{"timeout_seconds"}},
		{`{"python_code":"` + strings.Repeat("x", fuzzMaxCode+1) + `"}`, []string{"python_code", "1025 bytes", "1024", "max_code"}},
		{`{"python_code":"1","global_variables":{"big":"` + strings.Repeat("y", fuzzMaxCode) + `"}}`, []string{"global_variables", "1024", "max_code"}},
		{`{"python_code":"1"`, []string{"invalid arguments"}},
		{`{"python_code":"1","timeout_seconds":"` + strings.Repeat("9", 5000) + `"}`, []string{"timeout_seconds"}},
		{`{"python_code":` + strings.Repeat("7", 5000) + `}`, []string{"python_code"}},
	} {
		_, err := parseArgs([]byte(tc.raw), fuzzMaxCode)
		if err == nil {
			t.Errorf("%.60s: accepted", tc.raw)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%.60s: error %q does not mention %q", tc.raw, err, w)
			}
		}
	}
}

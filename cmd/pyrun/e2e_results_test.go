package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ---- calls -----------------------------------------------------------------

// structured mirrors structuredContent (docs/contract.md section 2).
type structured struct {
	Status       string          `json:"status"`
	Stdout       string          `json:"stdout"`
	Stderr       string          `json:"stderr"`
	Output       []chunk         `json:"output"`
	ReturnValue  json.RawMessage `json:"return_value"`
	Error        *string         `json:"error"`
	Dependencies []string        `json:"dependencies"`
	ExitCode     int             `json:"exit_code"`
	DurationMS   float64         `json:"duration_ms"`
	SessionID    string          `json:"session_id"`
	Checkpoint   *struct {
		AfterCall int    `json:"after_call"`
		Taken     string `json:"taken"`
	} `json:"checkpoint"`
	Displays []displayInfo `json:"displays"`
	Files    []fileInfo    `json:"files"`
}

type displayInfo struct {
	MIMEType string `json:"mime_type"`
	URI      string `json:"uri"`
	Bytes    int    `json:"bytes"`
}

type fileInfo struct {
	Path     string `json:"path"`
	URI      string `json:"uri"`
	MIMEType string `json:"mime_type"`
	Bytes    int    `json:"bytes"`
}

type chunk struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// result is a checked tool result: its text block, split into sections, and
// its structured content.
type result struct {
	isError  bool
	text     string
	sections map[string]string
	sc       structured
	// rest are the content blocks after the text block (rich results).
	rest []sdk.Content
}

var structuredKeys = []string{
	"status", "stdout", "stderr", "output", "return_value", "error",
	"dependencies", "exit_code", "duration_ms",
}

var exitCodes = map[string]int{
	"success": 0, "run-error": 1, "install-error": 1,
	"timeout": 124, "memory-error": 137, "crashed": 137,
}

// callRaw calls run_python_code with args. Safe from any goroutine.
func (s *server) callRaw(ctx context.Context, args map[string]any) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return s.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: args})
}

// call calls run_python_code and checks the invariants every result of a
// call that ran must hold. Safe from any goroutine.
func (s *server) call(ctx context.Context, args map[string]any) (result, error) {
	res, err := s.callRaw(ctx, args)
	if err != nil {
		return result{}, err
	}
	return checkResult(res)
}

func (s *server) mustCall(t *testing.T, args map[string]any) result {
	t.Helper()
	r, err := s.call(t.Context(), args)
	if err != nil {
		t.Fatalf("call %v: %v", args, err)
	}
	return r
}

func (s *server) run(t *testing.T, code string) result {
	t.Helper()
	return s.mustCall(t, map[string]any{"python_code": code})
}

func checkResult(res *sdk.CallToolResult) (result, error) {
	var r result
	if len(res.Content) == 0 {
		return r, errors.New("no content blocks")
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		return r, fmt.Errorf("the first content block is %T, want text", res.Content[0])
	}
	r.text, r.isError, r.rest = tc.Text, res.IsError, res.Content[1:]
	if res.StructuredContent == nil {
		return r, fmt.Errorf("no structuredContent; text: %s", r.text)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return r, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return r, fmt.Errorf("structuredContent is not an object: %s", raw)
	}
	for _, k := range structuredKeys {
		if _, ok := keys[k]; !ok {
			return r, fmt.Errorf("structuredContent lacks %q: %s", k, raw)
		}
	}
	if err := json.Unmarshal(raw, &r.sc); err != nil {
		return r, fmt.Errorf("structuredContent %s: %w", raw, err)
	}
	sc := &r.sc
	if r.sections, err = parseBlock(r.text); err != nil {
		return r, fmt.Errorf("text block does not parse: %v\n%s", err, r.text)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if r.sections["session_id"] != sc.SessionID {
		bad("text says session_id %q, structuredContent %q", r.sections["session_id"], sc.SessionID)
	}
	if r.sections["status"] != sc.Status {
		bad("text says status %q, structuredContent %q", r.sections["status"], sc.Status)
	}
	want, known := exitCodes[sc.Status]
	if !known {
		bad("unknown status %q", sc.Status)
	}
	if sc.ExitCode != want {
		bad("status %s with exit_code %d, want %d", sc.Status, sc.ExitCode, want)
	}
	if r.isError != (sc.Status != "success") {
		bad("isError %v with status %s", r.isError, sc.Status)
	}
	if sc.DurationMS < 0 {
		bad("negative duration_ms %v", sc.DurationMS)
	}
	// The ordered output and the two streams tell one story.
	var all, out, errs strings.Builder
	for _, c := range sc.Output {
		all.WriteString(c.Text)
		switch c.Stream {
		case "stdout":
			out.WriteString(c.Text)
		case "stderr":
			errs.WriteString(c.Text)
		default:
			bad("output chunk on stream %q", c.Stream)
		}
	}
	if out.String() != sc.Stdout || errs.String() != sc.Stderr {
		bad("output chunks do not add up to stdout %q and stderr %q: %v", sc.Stdout, sc.Stderr, sc.Output)
	}
	wantOutput := strings.TrimSuffix(all.String(), "\n")
	gotOutput, hasOutput := r.sections["output"]
	switch {
	case wantOutput == "" && hasOutput:
		bad("an <output> section without output")
	case wantOutput != "" && !strings.Contains(wantOutput, "<") && gotOutput != wantOutput:
		bad("<output> is %q, the output chunks say %q", gotOutput, wantOutput)
	}
	if sc.Status == "success" {
		if sc.Error != nil {
			bad("success with error %q", *sc.Error)
		}
		if _, ok := r.sections["error"]; ok {
			bad("success with an <error> section")
		}
		text, has := r.sections["return_value"]
		isNull := len(sc.ReturnValue) == 0 || string(sc.ReturnValue) == "null"
		switch {
		case has && !jsonEqual(text, string(sc.ReturnValue)):
			bad("<return_value> %s differs from return_value %s", text, sc.ReturnValue)
		case !has && !isNull:
			bad("return_value %s without a <return_value> section", sc.ReturnValue)
		}
	} else {
		if sc.Error == nil || *sc.Error == "" {
			bad("status %s without an error", sc.Status)
		} else if e := r.sections["error"]; !strings.Contains(*sc.Error, "<") && e != *sc.Error {
			bad("<error> %q differs from error %q", e, *sc.Error)
		}
		if _, ok := r.sections["return_value"]; ok {
			bad("status %s with a <return_value> section", sc.Status)
		}
	}
	// The text block lists every display and file the result carries.
	if n := len(sc.Displays); n != len(itemLines(r.sections["displays"])) {
		bad("%d displays, but <displays> is %q", n, r.sections["displays"])
	}
	if n := len(sc.Files); n != len(itemLines(r.sections["files"])) {
		bad("%d files, but <files> is %q", n, r.sections["files"])
	}
	if len(sc.Displays)+len(sc.Files) == 0 && len(r.rest) > 0 {
		bad("%d content blocks after the text without displays or files", len(r.rest))
	}
	if len(problems) > 0 {
		return r, fmt.Errorf("inconsistent result:\n  %s\ntext:\n%s", strings.Join(problems, "\n  "), r.text)
	}
	return r, nil
}

// sectionOrder is the order of the text block's sections; return_value and
// error share a place, as only one of them appears.
var sectionOrder = map[string]int{"status": 0, "session_id": 1, "dependencies": 2, "output": 3, "displays": 4, "files": 5, "return_value": 6, "error": 6}

// itemLines are the lines of a <displays> or <files> section that name an
// item, without pyrun's notes.
func itemLines(section string) []string {
	var items []string
	for _, l := range strings.Split(section, "\n") {
		if l != "" && !strings.HasPrefix(l, "[pyrun:") {
			items = append(items, l)
		}
	}
	return items
}

// parseBlock splits mcp-run-python's text block into its sections. It fails
// on anything outside a section, an unknown or repeated section, or sections
// out of order, so a passing parse means the block is well formed.
func parseBlock(text string) (map[string]string, error) {
	secs := map[string]string{}
	last := -1
	rest := text
	for rest != "" {
		if !strings.HasPrefix(rest, "<") {
			return nil, fmt.Errorf("text outside a section: %q", clipText(rest))
		}
		end := strings.IndexByte(rest, '>')
		if end < 0 {
			return nil, fmt.Errorf("unterminated tag: %q", clipText(rest))
		}
		tag := rest[1:end]
		pos, known := sectionOrder[tag]
		if !known {
			return nil, fmt.Errorf("unknown section <%s>", tag)
		}
		if pos <= last {
			return nil, fmt.Errorf("section <%s> repeated or out of order", tag)
		}
		last = pos
		body := rest[end+1:]
		closing := "</" + tag + ">"
		i := strings.Index(body, closing)
		if i < 0 {
			return nil, fmt.Errorf("section <%s> is not closed", tag)
		}
		rest = strings.TrimPrefix(body[i+len(closing):], "\n")
		body = body[:i]
		if tag != "status" && tag != "dependencies" && tag != "session_id" {
			if !strings.HasPrefix(body, "\n") || !strings.HasSuffix(body, "\n") {
				return nil, fmt.Errorf("section <%s> does not hold its text on lines of its own", tag)
			}
			body = body[1 : len(body)-1]
		}
		secs[tag] = body
	}
	if _, ok := secs["status"]; !ok {
		return nil, errors.New("no <status>")
	}
	return secs, nil
}

func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// wantStatus fails the test unless r has status.
func wantStatus(t *testing.T, r result, status string) {
	t.Helper()
	if r.sc.Status != status {
		t.Fatalf("status %q, want %q; text:\n%s", r.sc.Status, status, r.text)
	}
}

// wantValue fails the test unless r succeeded with the return value want (JSON).
func wantValue(t *testing.T, r result, want string) {
	t.Helper()
	wantStatus(t, r, "success")
	if !jsonEqual(string(r.sc.ReturnValue), want) {
		t.Fatalf("return_value %s, want %s; text:\n%s", r.sc.ReturnValue, want, r.text)
	}
	if !jsonEqual(r.sections["return_value"], want) {
		t.Fatalf("<return_value> %q, want %s", r.sections["return_value"], want)
	}
}

// mergeChunks joins consecutive chunks of one stream: how writes are split
// into chunks is not part of the contract, their order is.
func mergeChunks(cs []chunk) []chunk {
	var out []chunk
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].Stream == c.Stream {
			out[n-1].Text += c.Text
			continue
		}
		out = append(out, c)
	}
	return out
}

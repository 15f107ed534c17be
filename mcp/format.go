package mcp

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/pyrun/pyrun/supervisor"
)

// Structured is a call's structuredContent. Its JSON shape is part of pyrun's
// contract (docs/contract.md section 2) and matches outputSchema.
type Structured struct {
	Status       supervisor.Status  `json:"status"`
	Stdout       string             `json:"stdout"`
	Stderr       string             `json:"stderr"`
	Output       []supervisor.Chunk `json:"output"`
	ReturnValue  json.RawMessage    `json:"return_value"`
	Error        *string            `json:"error"`
	Dependencies []string           `json:"dependencies"`
	ExitCode     int                `json:"exit_code"`
	DurationMS   float64            `json:"duration_ms"`
	SessionID    string             `json:"session_id,omitempty"`
	// Checkpoint names the checkpoint a session went back to after its
	// worker was lost (docs/sessions.md); absent otherwise.
	Checkpoint *supervisor.CheckpointRef `json:"checkpoint,omitempty"`
	// Displays and Files are what the call showed and wrote under
	// /output/ (docs/contract.md section 9); absent when there are none.
	Displays []DisplayInfo `json:"displays,omitempty"`
	Files    []FileInfo    `json:"files,omitempty"`
}

// structured builds the structuredContent of a result.
func structured(r supervisor.Result) Structured {
	s := Structured{
		Status:       r.Status,
		Stdout:       r.Stdout,
		Stderr:       r.Stderr,
		Output:       r.Output,
		ReturnValue:  json.RawMessage("null"),
		Dependencies: r.Dependencies,
		ExitCode:     r.Status.ExitCode(),
		DurationMS:   float64(r.Duration.Microseconds()) / 1000,
		SessionID:    r.SessionID,
		Checkpoint:   r.Checkpoint,
	}
	if s.Output == nil {
		s.Output = []supervisor.Chunk{}
	}
	if s.Dependencies == nil {
		s.Dependencies = []string{}
	}
	if r.Value != "" && json.Valid([]byte(r.Value)) {
		s.ReturnValue = json.RawMessage(r.Value)
	}
	if r.Status != supervisor.StatusSuccess {
		e := r.Error
		s.Error = &e
	}
	return s
}

// FormatXML renders a result as the text block of pydantic's mcp-run-python:
// status, dependencies (when packages were loaded), output, and the return
// value or the error. A closing tag inside a section is escaped so that the
// block always parses.
func FormatXML(r supervisor.Result) string {
	var b strings.Builder
	b.WriteString("<status>")
	b.WriteString(string(r.Status))
	b.WriteString("</status>\n")
	if r.SessionID != "" {
		b.WriteString("<session_id>")
		b.WriteString(escapeTag("session_id", r.SessionID))
		b.WriteString("</session_id>\n")
	}
	if len(r.Dependencies) > 0 {
		deps, _ := json.Marshal(r.Dependencies)
		b.WriteString("<dependencies>")
		b.WriteString(escapeTag("dependencies", string(deps)))
		b.WriteString("</dependencies>\n")
	}
	var out strings.Builder
	for _, c := range r.Output {
		out.WriteString(c.Text)
	}
	if text := strings.TrimSuffix(out.String(), "\n"); text != "" {
		b.WriteString("<output>\n")
		b.WriteString(escapeTag("output", text))
		b.WriteString("\n</output>\n")
	}
	formatRich(&b, r)
	if r.Status == supervisor.StatusSuccess {
		if r.Value != "" {
			b.WriteString("<return_value>\n")
			b.WriteString(escapeTag("return_value", r.Value))
			b.WriteString("\n</return_value>\n")
		}
	} else {
		b.WriteString("<error>\n")
		b.WriteString(escapeTag("error", r.Error))
		b.WriteString("\n</error>\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var tagPatterns = map[string]*regexp.Regexp{}

func init() {
	for _, tag := range []string{"session_id", "dependencies", "output", "return_value", "error", "displays", "files"} {
		tagPatterns[tag] = regexp.MustCompile(`(?i)</?\s*` + tag + `(?:[^>\n]*>)?`)
	}
}

// escapeTag escapes every opening or closing form of tag in s, as
// mcp-run-python does, so that the content cannot end its section early.
func escapeTag(tag, s string) string {
	re := tagPatterns[tag]
	if !strings.Contains(s, "<") {
		return s
	}
	return re.ReplaceAllStringFunc(s, func(m string) string {
		m = strings.ReplaceAll(m, "<", "&lt;")
		return strings.ReplaceAll(m, ">", "&gt;")
	})
}

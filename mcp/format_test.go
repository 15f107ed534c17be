package mcp

import (
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// TestFormatEscapesNames: names and mime types the code chose reach the
// text block with their control and bidirectional characters escaped: an
// ESC cannot drive the reader's terminal, an override cannot show a name
// reversed.
func TestFormatEscapesNames(t *testing.T) {
	r := supervisor.Result{
		Status: supervisor.StatusSuccess,
		Files: []supervisor.OutputFile{
			{Path: "a\x1b[2J\x1b]0;owned\x07b.txt", MIMEType: "text/plain", Size: 1},
			{Path: "invoice\u202efdp.exe", MIMEType: "application/octet-stream"},
			{Path: "zero\u200bwidth\u2066.txt", MIMEType: "text/plain"},
			{Path: "bad\xffutf8.bin", MIMEType: "application/octet-stream"},
			{Path: "plain héllo.txt", MIMEType: "text/plain"},
		},
		Displays: []supervisor.Display{{MIMEType: "text/x-\x1b[31m", Data: []byte("y")}},
	}
	text := FormatXML(r)
	for _, raw := range []string{"\x1b", "\x07", "\u202e", "\u200b", "\u2066", "\xff"} {
		if strings.Contains(text, raw) {
			t.Errorf("the text block holds %q raw:\n%s", raw, text)
		}
	}
	for _, want := range []string{
		`/output/"a\x1b[2J\x1b]0;owned\ab.txt" text/plain 1 byte`,
		`/output/"invoice\u202efdp.exe" application/octet-stream 0 bytes`,
		`/output/"zero\u200bwidth\u2066.txt" text/plain`,
		`/output/"bad\xffutf8.bin"`,
		"/output/plain héllo.txt text/plain 0 bytes",
		`"text/x-\x1b[31m" 1 byte`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the text block lacks %s:\n%s", want, text)
		}
	}
}

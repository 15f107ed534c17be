package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/tools/txtar"

	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

var update = flag.Bool("update", false, "rewrite the text and answer.json sections of testdata/results/*.txtar")

// resultCase is a transcript's input: the pool's result for a call, and
// the server's options that shape the answer.
type resultCase struct {
	supervisor.Result
	// Files are the /output/ files: their bytes are Base64, or else the
	// transcript's section output/PATH.
	Files []struct{ Path, MIMEType, Base64 string }
	// MaxDisplays and MaxDisplayBytes cap the image blocks; 0: the
	// defaults.
	MaxDisplays, MaxDisplayBytes int
}

// tokenURI matches the random part of the URIs of a call's displays and
// files, which the transcripts show as TOKEN.
var tokenURI = regexp.MustCompile(`pyrun://(display|output)/[A-Za-z0-9_-]+/`)

// TestResultTranscripts: testdata/results/*.txtar each hold a result of
// the pool (result.json, and output/* for the files it wrote) and what a
// client gets for it over MCP: the text block (text), and the rest of the
// tool result (answer.json: isError, structuredContent and the content
// blocks after the text block). -update rewrites the two.
func TestResultTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "results", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sections := map[string][]byte{}
			for _, f := range ar.Files {
				sections[f.Name] = f.Data
			}
			var c resultCase
			if err := json.Unmarshal(sections["result.json"], &c); err != nil {
				t.Fatalf("result.json: %v", err)
			}
			res := c.Result
			res.Files = nil
			for _, f := range c.Files {
				data, ok := sections["output/"+f.Path]
				if f.Base64 != "" {
					data, err = base64.StdEncoding.DecodeString(f.Base64)
					ok = err == nil
				}
				if !ok {
					t.Fatalf("no bytes for output/%s", f.Path)
				}
				res.Files = append(res.Files, mcptest.OutputFile(t, f.Path, f.MIMEType, data))
			}
			text, answer := callFor(t, res, Options{MaxDisplays: c.MaxDisplays, MaxDisplayBytes: c.MaxDisplayBytes})
			if *update {
				for i, f := range ar.Files {
					switch f.Name {
					case "text":
						ar.Files[i].Data = []byte(text + "\n")
					case "answer.json":
						ar.Files[i].Data = answer
					}
				}
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := strings.TrimSuffix(string(sections["text"]), "\n"); text != want {
				t.Errorf("text block:\n%s\nwant:\n%s", text, want)
			}
			if want := sections["answer.json"]; !bytes.Equal(answer, want) {
				t.Errorf("answer.json:\n%s\nwant:\n%s", answer, want)
			}
		})
	}
}

// callFor runs one call over MCP (an in-memory client of a server whose
// pool returns res) and returns its text block and the rest of the tool
// result as indented JSON, the URIs' random part as TOKEN.
func callFor(t *testing.T, res supervisor.Result, opts Options) (string, []byte) {
	t.Helper()
	opts.Version = "test"
	s := New(mcptest.Result(res), opts, testLogger(t))
	serverT, clientT := sdk.NewInMemoryTransports()
	ss, err := s.sdk.Connect(t.Context(), serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).
		Connect(t.Context(), clientT, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"python_code": "..."}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "_meta")
	content, _ := m["content"].([]any)
	if len(content) == 0 {
		t.Fatalf("no content: %s", raw)
	}
	first, _ := content[0].(map[string]any)
	text, ok := first["text"].(string)
	if first["type"] != "text" || !ok {
		t.Fatalf("the first block is no text block: %v", content[0])
	}
	m["content"] = content[1:]
	answer, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return text, append(tokenURI.ReplaceAll(answer, []byte("pyrun://$1/TOKEN/")), '\n')
}

package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/outputs"
	"github.com/pyrun/pyrun/supervisor"
)

// Rich results (docs/contract.md section 9): what a call showed becomes content
// blocks after the text block, files it wrote under /output/ become
// resource links the calling client can read for a while, and the text
// block lists both, so that a client that drops images still tells the
// model what was shown.

// URI prefixes of what a call shows and writes.
const (
	displayURIPrefix = "pyrun://display/"
	outputURIPrefix  = "pyrun://output/"
)

// DisplayInfo describes one display in structuredContent.displays.
type DisplayInfo struct {
	MIMEType string `json:"mime_type"`
	URI      string `json:"uri"`
	Bytes    int    `json:"bytes"`
}

// FileInfo describes one /output/ file in structuredContent.files.
type FileInfo struct {
	Path     string `json:"path"`
	URI      string `json:"uri"`
	MIMEType string `json:"mime_type"`
	Bytes    int    `json:"bytes"`
}

// rasterImage says whether a mime type becomes an image block.
func rasterImage(mime string) bool {
	switch mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// textual says whether content of a mime type goes in a resource's text.
func textual(mime string) bool {
	return strings.HasPrefix(mime, "text/") || strings.HasSuffix(mime, "+xml") ||
		strings.HasSuffix(mime, "+json") || mime == "application/json" || mime == "application/xml" ||
		mime == "application/javascript"
}

// richContent turns a result's displays and files into content blocks (to
// follow the text block) and structuredContent entries. Files are kept in
// the output store for owner.
func (s *Server) richContent(res supervisor.Result, owner string) ([]sdk.Content, []DisplayInfo, []FileInfo) {
	if len(res.Displays) == 0 && len(res.Files) == 0 {
		return nil, nil, nil
	}
	opts := s.options()
	token := outputs.Token()
	var content []sdk.Content
	var displays []DisplayInfo
	shown, shownBytes := 0, 0
	for i, d := range res.Displays {
		uri := displayURIPrefix + token + "/" + strconv.Itoa(i+1)
		displays = append(displays, DisplayInfo{MIMEType: d.MIMEType, URI: uri, Bytes: len(d.Data)})
		shown++
		shownBytes += len(d.Data)
		content = append(content, displayBlock(uri, d.MIMEType, d.Data))
	}
	var files []FileInfo
	for _, f := range res.Files {
		uri := outputURIPrefix + token + "/" + escapePath(f.Path)
		// Image files are also shown, under the display caps: read before
		// the store takes the file.
		var image []byte
		if rasterImage(f.MIMEType) && shown < opts.MaxDisplays && shownBytes+int(f.Size) <= opts.MaxDisplayBytes {
			if b, err := f.Data.ReadAll(); err == nil {
				image = b
			}
		}
		if !s.outputs.Put(owner, uri, f.MIMEType, f.Data) {
			f.Data.Remove()
			s.log.Warn("an output file is larger than the output store, or could not be moved into it", "path", f.Path, "bytes", f.Size)
			continue
		}
		files = append(files, FileInfo{Path: f.Path, URI: uri, MIMEType: f.MIMEType, Bytes: int(f.Size)})
		if image != nil {
			shown++
			shownBytes += len(image)
			content = append(content, &sdk.ImageContent{Data: image, MIMEType: f.MIMEType})
		}
		size := f.Size
		content = append(content, &sdk.ResourceLink{
			URI: uri, Name: f.Path, MIMEType: f.MIMEType, Size: &size,
			Description: "a file the call wrote to /output/" + lineText(f.Path) + "; readable with resources/read for " + s.outputs.TTL().String(),
		})
	}
	return content, displays, files
}

// escapePath percent-encodes each segment of a relative path for a URI.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// lineText is s (a name the code chose) for one line of the text block:
// quoted, with Go's escapes, if it holds a line break or any other
// character that is not printable (an ESC that starts a terminal sequence,
// a bidirectional override that shows a name reversed, a zero-width
// character) or bytes that are not UTF-8. A model or a person reading the
// block sees what the name is, not what it makes a terminal do.
func lineText(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// displayBlock is the content block of one display.
func displayBlock(uri, mime string, data []byte) sdk.Content {
	switch {
	case rasterImage(mime):
		return &sdk.ImageContent{Data: data, MIMEType: mime}
	case mime == "text/markdown":
		return &sdk.TextContent{Text: string(data)}
	case textual(mime):
		return &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: mime, Text: string(data)}}
	}
	return &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: mime, Blob: data}}
}

// formatRich writes the <displays> and <files> sections of the text block:
// one line per item, and a note when the caps dropped some.
func formatRich(b *strings.Builder, r supervisor.Result) {
	if len(r.Displays) > 0 || r.DisplaysDropped > 0 {
		b.WriteString("<displays>\n")
		for _, d := range r.Displays {
			fmt.Fprintf(b, "%s %s\n", escapeTag("displays", lineText(d.MIMEType)), sizeText(len(d.Data)))
		}
		if n := r.DisplaysDropped; n > 0 {
			fmt.Fprintf(b, "[pyrun: %d more %s dropped: over the limit of displays a call (max_displays, max_display_bytes)]\n", n, plural(n, "display was", "displays were"))
		}
		b.WriteString("</displays>\n")
	}
	if len(r.Files) > 0 || r.FilesDropped > 0 {
		b.WriteString("<files>\n")
		for _, f := range r.Files {
			fmt.Fprintf(b, "/output/%s %s %s\n", escapeTag("files", lineText(f.Path)), escapeTag("files", lineText(f.MIMEType)), sizeText(int(f.Size)))
		}
		if n := r.FilesDropped; n > 0 {
			fmt.Fprintf(b, "[pyrun: %d more %s not returned: over the limit of output files a call (output_store, output_store_files)]\n", n, plural(n, "file was", "files were"))
		}
		b.WriteString("</files>\n")
	}
}

func sizeText(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.Itoa(n) + " bytes"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// --- files in ----------------------------------------------------------------

// DefaultMaxInputFiles is how many entries the files argument may hold
// unless Options.MaxInputFiles says otherwise.
const DefaultMaxInputFiles = 1000

// errTooManyInputFiles is wrapped by decodeFiles' error for a files
// argument with more entries than max_input_files.
var errTooManyInputFiles = errors.New("too many input files")

// decodeFiles checks and decodes the files argument: an object of relative
// path to content, a string for text or {"base64": "..."} for bytes, at most
// maxFiles entries and maxBytes in total. Its cost is linear in the
// argument's size (a sort of the paths aside): the entries are counted as
// they are read, so an argument with too many is refused before they are
// decoded, and it stops when ctx ends (the client has gone).
func decodeFiles(ctx context.Context, raw json.RawMessage, maxBytes, maxFiles int) ([]supervisor.InputFile, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if maxFiles <= 0 {
		maxFiles = DefaultMaxInputFiles
	}
	notObject := errors.New("invalid arguments: files must be an object of relative path to content")
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, notObject
	}
	var files []supervisor.InputFile
	total := 0
	for dec.More() {
		if len(files)%256 == 255 && ctx.Err() != nil {
			return nil, fmt.Errorf("checking the files argument: %w", context.Cause(ctx))
		}
		if len(files) >= maxFiles {
			return nil, fmt.Errorf("invalid arguments: files holds more than the limit of %d entries (max_input_files): %w", maxFiles, errTooManyInputFiles)
		}
		tok, err := dec.Token()
		p, ok := tok.(string)
		if err != nil || !ok {
			return nil, notObject
		}
		if err := supervisor.CheckInputPath(p); err != nil {
			return nil, fmt.Errorf("invalid arguments: files: %w", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, notObject
		}
		var data []byte
		var text string
		var bin struct {
			Base64 *string `json:"base64"`
		}
		switch {
		case json.Unmarshal(v, &text) == nil:
			data = []byte(text)
		case json.Unmarshal(v, &bin) == nil && bin.Base64 != nil:
			if data, err = base64.StdEncoding.DecodeString(*bin.Base64); err != nil {
				return nil, fmt.Errorf("invalid arguments: files: %q: base64 does not decode: %v", p, err)
			}
		default:
			return nil, fmt.Errorf(`invalid arguments: files: %q: content must be a string or {"base64": "..."}`, p)
		}
		total += len(data)
		if total > maxBytes {
			return nil, fmt.Errorf("invalid arguments: files hold more than the limit of %d bytes (max_code)", maxBytes)
		}
		files = append(files, supervisor.InputFile{Path: p, Data: data})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, notObject
	}
	// Sorted with "/" below every other character (NUL is refused above),
	// a folder's files follow it at once: comparing neighbours finds every
	// path that is both a file and a folder of another, and every path
	// given twice.
	slices.SortFunc(files, func(a, b supervisor.InputFile) int { return comparePaths(a.Path, b.Path) })
	for i := 1; i < len(files); i++ {
		prev, p := files[i-1].Path, files[i].Path
		switch {
		case p == prev:
			return nil, fmt.Errorf("invalid arguments: files: %q is given twice", p)
		case strings.HasPrefix(p, prev+"/"):
			return nil, fmt.Errorf("invalid arguments: files: %q is a file and a folder of %q", prev, p)
		}
	}
	return files, nil
}

// comparePaths orders paths as strings in which "/" comes before every
// other byte.
func comparePaths(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		switch {
		case a[i] == '/':
			return -1
		case b[i] == '/':
			return 1
		case a[i] < b[i]:
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// --- resources/read ------------------------------------------------------------

// outputTemplate is the resource template of /output/ files.
var outputTemplate = &sdk.ResourceTemplate{
	Name:        "output",
	Title:       "Files a call wrote under /output/",
	URITemplate: outputURIPrefix + "{token}/{+path}",
	Description: "A file a run_python_code call wrote under /output/, readable by the client that ran the call until it expires (output_ttl).",
}

// readOutput answers resources/read for an /output/ file. The file is
// read into memory to be sent (as text, or base64 in the JSON answer):
// reads wait for one another beyond maxReading bytes at once, so that a
// client reading large files many times at once cannot make pyrun hold
// them all.
func (s *Server) readOutput(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	mime, f, size, err := s.outputs.Get(clientOfExtra(ctx, req.Extra), uri)
	if err != nil {
		msg := fmt.Sprintf("%s: no such output for this client (unknown, or written by another client's call)", uri)
		switch {
		case errors.Is(err, outputs.ErrExpired):
			msg = fmt.Sprintf("%s expired: outputs are kept for %s (output_ttl)", uri, s.outputs.TTL())
		case errors.Is(err, outputs.ErrDropped):
			msg = fmt.Sprintf("%s was dropped: the output store keeps a bounded number of files and bytes (output_store, output_store_files), oldest dropped first", uri)
		}
		return nil, &jsonrpc.Error{Code: sdk.CodeResourceNotFound, Message: msg, Data: json.RawMessage(fmt.Sprintf(`{"uri":%q}`, uri))}
	}
	defer f.Close()
	weight := min(size, maxReading)
	if err := s.reading.Acquire(ctx, weight); err != nil {
		return nil, fmt.Errorf("waiting to read %s: %w", uri, err)
	}
	defer s.reading.Release(weight)
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("reading %s: %w", uri, err)
	}
	c := &sdk.ResourceContents{URI: uri, MIMEType: mime}
	if textual(mime) && utf8.Valid(data) {
		c.Text = string(data)
	} else {
		c.Blob = data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{c}}, nil
}

// maxReading bounds the bytes of /output/ files read into memory for
// resources/read at once; a larger file is read alone.
const maxReading = 32 << 20

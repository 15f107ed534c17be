package main

import (
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pyrun/pyrun/supervisor"
)

// mountPaths are the sandbox paths of mounts, for the tool description.
func mountPaths(ms []supervisor.Mount) []string {
	var ps []string
	for _, m := range ms {
		p := m.Path
		if m.RW {
			p += " (writable)"
		}
		ps = append(ps, p)
	}
	return ps
}

// saveRich writes what a `pyrun run` call showed and wrote under /output/
// into dir, for a terminal user: displays as display-N.EXT, /output/ files
// at their own paths. It tells stderr where each went.
func saveRich(res supervisor.Result, dir string, stderr io.Writer) error {
	defer res.RemoveFiles() // the files not saved
	if len(res.Displays) == 0 && len(res.Files) == 0 {
		return nil
	}
	if dir == "" {
		fmt.Fprintf(stderr, "pyrun: the call showed %d and wrote %d files under /output/; run with --out DIR to save them\n",
			len(res.Displays), len(res.Files))
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for i, d := range res.Displays {
		name := "display-" + strconv.Itoa(i+1) + extension(d.MIMEType)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, d.Data, 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(stderr, "pyrun: display %d (%s, %d bytes) saved to %s\n", i+1, d.MIMEType, len(d.Data), p)
	}
	for _, f := range res.Files {
		// The supervisor checked the path: relative, without "..".
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := f.Data.MoveTo(p); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		_ = os.Chmod(p, 0o644) // spooled files are private
		fmt.Fprintf(stderr, "pyrun: /output/%s (%d bytes) saved to %s\n", f.Path, f.Size, p)
	}
	return nil
}

// extension is the file name extension for a display's mime type.
func extension(mimeType string) string {
	switch mimeType {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/svg+xml":
		return ".svg"
	case "text/html":
		return ".html"
	case "text/markdown":
		return ".md"
	case "application/json":
		return ".json"
	case "text/latex":
		return ".tex"
	case "text/plain":
		return ".txt"
	}
	if exts, _ := mime.ExtensionsByType(mimeType); len(exts) > 0 {
		return exts[0]
	}
	return ".bin"
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation's links between its pages reach a file that exists and
// a heading that exists on it, so that moving a section cannot leave a
// reader at a dead end.
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(root, "scripts", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(append(pages, filepath.Join(root, "README.md")), more...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, l := range markdownLinks(string(b)) {
			target, anchor, _ := strings.Cut(l.dest, "#")
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: the link to %s finds no file", rel, l.line, l.dest)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s:%d: the link to %s finds no heading #%s", rel, l.line, l.dest, anchor)
			}
		}
	}
}

type mdLink struct {
	dest string
	line int
}

var linkDest = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownLinks are the relative links of a page, outside code blocks and
// code spans.
func markdownLinks(page string) []mdLink {
	var links []mdLink
	fence := false
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range linkDest.FindAllStringSubmatch(dropCodeSpans(line), -1) {
			d := m[1]
			if strings.Contains(d, "://") || strings.HasPrefix(d, "mailto:") {
				continue
			}
			links = append(links, mdLink{d, i + 1})
		}
	}
	return links
}

func dropCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}

// headingAnchors are the anchors GitHub gives a page's headings: the text
// lowercased, without punctuation but hyphens and underscores, spaces as
// hyphens, and a -1, -2, ... for a repeated one.
func headingAnchors(page string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fence || !ok || !strings.HasPrefix(line, "#") || len(line)-len(strings.TrimLeft(line, "#")) > 6 {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			a[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	return a
}

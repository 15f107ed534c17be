package packages

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/mail"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// candidate is one version of one package that can be installed.
type candidate struct {
	name     string // normalized
	display  string // as its index spells it
	version  string
	fileName string   // the file's base name
	source   string   // where the file is: a URL or a local path
	sha256   string   // hex; "" until a local file is hashed
	imports  []string // top-level modules it provides
	requires []Requirement
	from     string // "the package index", "the wheelhouse" or "PyPI"
	// lazy: requires are read when the candidate is chosen (PyPI lists
	// versions without them).
	lazy bool
}

// lockFile is the part of a pyodide-lock.json that pyrun reads.
type lockFile struct {
	Info struct {
		Python string `json:"python"`
	} `json:"info"`
	Packages map[string]struct {
		Name     string   `json:"name"`
		Version  string   `json:"version"`
		FileName string   `json:"file_name"`
		SHA256   string   `json:"sha256"`
		Imports  []string `json:"imports"`
		Depends  []string `json:"depends"`
	} `json:"packages"`
}

// distribution is the package index's packages, from its lock file.
type distribution struct {
	python  string
	byName  map[string]*candidate
	imports map[string]string // top-level module -> normalized name
}

// parseLock reads a pyodide-lock.json; base is where its files are (a URL
// ending in / or a directory).
func parseLock(b []byte, base string) (*distribution, error) {
	var lf lockFile
	if err := json.Unmarshal(b, &lf); err != nil {
		return nil, fmt.Errorf("read pyodide-lock.json: %w", err)
	}
	d := &distribution{python: lf.Info.Python, byName: map[string]*candidate{}, imports: map[string]string{}}
	keys := make([]string, 0, len(lf.Packages))
	for k := range lf.Packages {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first package that claims a module keeps it
	for _, k := range keys {
		p := lf.Packages[k]
		if p.FileName == "" || p.Version == "" {
			continue
		}
		name := Normalize(cmpOr(p.Name, k))
		c := &candidate{
			name: name, display: cmpOr(p.Name, k), version: p.Version,
			fileName: path.Base(p.FileName), sha256: strings.ToLower(p.SHA256),
			imports: p.Imports, from: "the package index",
		}
		switch {
		case strings.Contains(p.FileName, "://"):
			c.source = p.FileName
		case IsURL(base):
			c.source = base + p.FileName
		default:
			c.source = filepath.Join(base, filepath.FromSlash(p.FileName))
		}
		for _, dep := range p.Depends {
			c.requires = append(c.requires, Requirement{Name: Normalize(dep)})
		}
		d.byName[name] = c
		for _, imp := range p.Imports {
			if _, ok := d.imports[imp]; !ok {
				d.imports[imp] = name
			}
		}
	}
	return d, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// IsURL reports whether an index or wheel source is fetched over HTTP
// rather than read from a directory.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// wheelhouse is a directory of wheels, read again when it changes.
type wheelhouse struct {
	dir  string
	read map[string]wheelEntry // by file name
}

type wheelEntry struct {
	size  int64
	mtime time.Time
	c     *candidate // nil: not a wheel pyrun can install
}

// scan brings the wheelhouse up to date and returns its candidates by name.
func (w *wheelhouse) scan() (map[string][]*candidate, map[string]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read wheelhouse: %w", err)
	}
	if w.read == nil {
		w.read = map[string]wheelEntry{}
	}
	seen := map[string]bool{}
	byName := map[string][]*candidate{}
	imports := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".whl") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		seen[name] = true
		we, ok := w.read[name]
		if !ok || we.size != info.Size() || !we.mtime.Equal(info.ModTime()) {
			c, _ := readWheel(filepath.Join(w.dir, name)) // an unreadable wheel is left out
			we = wheelEntry{size: info.Size(), mtime: info.ModTime(), c: c}
			w.read[name] = we
		}
		if we.c == nil {
			continue
		}
		byName[we.c.name] = append(byName[we.c.name], we.c)
		for _, imp := range we.c.imports {
			if _, ok := imports[imp]; !ok {
				imports[imp] = we.c.name
			}
		}
	}
	for name := range w.read {
		if !seen[name] {
			delete(w.read, name)
		}
	}
	return byName, imports, nil
}

// readWheel describes a wheel from its file name (PEP 427) and metadata.
// Only wheels a Pyodide worker can load qualify: pure Python (none-any) or
// built for Pyodide (emscripten).
func readWheel(p string) (*candidate, error) {
	base := filepath.Base(p)
	parts := strings.Split(strings.TrimSuffix(base, ".whl"), "-")
	if len(parts) != 5 && len(parts) != 6 {
		return nil, fmt.Errorf("%s: not a wheel file name", base)
	}
	abi, plat := parts[len(parts)-2], parts[len(parts)-1]
	if !(abi == "none" && plat == "any") && !strings.Contains(plat, "emscripten") && !strings.Contains(plat, "pyodide") {
		return nil, fmt.Errorf("%s: built for %s, not for Pyodide", base, plat)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	c := &candidate{
		name: Normalize(parts[0]), display: parts[0], version: parts[1], fileName: base,
		source: p, sha256: hex.EncodeToString(h.Sum(nil)), from: "the wheelhouse",
	}
	var metadata, topLevel []byte
	tops := map[string]bool{}
	for _, zf := range zr.File {
		first, rest, nested := strings.Cut(zf.Name, "/")
		switch {
		case strings.HasSuffix(first, ".dist-info") && rest == "METADATA":
			metadata, err = readZipFile(zf)
		case strings.HasSuffix(first, ".dist-info") && rest == "top_level.txt":
			topLevel, err = readZipFile(zf)
		case strings.HasSuffix(first, ".dist-info"), strings.HasSuffix(first, ".data"), first == "__pycache__":
		case nested:
			tops[first] = true
		case strings.HasSuffix(first, ".py"):
			tops[strings.TrimSuffix(first, ".py")] = true
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", base, err)
		}
	}
	if metadata == nil {
		return nil, fmt.Errorf("%s: no METADATA", base)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(append(metadata, '\n')))
	if err != nil {
		return nil, fmt.Errorf("%s: METADATA: %w", base, err)
	}
	if n := msg.Header.Get("Name"); n != "" {
		c.name, c.display = Normalize(n), n
	}
	if v := msg.Header.Get("Version"); v != "" {
		c.version = v
	}
	for _, rd := range msg.Header["Requires-Dist"] {
		r, err := ParseRequirement(rd)
		if err != nil {
			return nil, fmt.Errorf("%s: Requires-Dist: %w", base, err)
		}
		c.requires = append(c.requires, r)
	}
	if topLevel != nil {
		for _, line := range strings.Split(string(topLevel), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, "/") {
				c.imports = append(c.imports, line)
			}
		}
	} else {
		for t := range tops {
			c.imports = append(c.imports, t)
		}
		slices.Sort(c.imports)
	}
	return c, nil
}

func readZipFile(zf *zip.File) ([]byte, error) {
	if zf.UncompressedSize64 > 4<<20 {
		return nil, fmt.Errorf("%s is larger than 4 MiB", zf.Name)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, 4<<20))
}

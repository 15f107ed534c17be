// Package packages finds, fetches and caches the Python packages pyrun's
// workers load: those of the Pyodide distribution, listed in the package
// index's pyodide-lock.json (a URL, by default the CDN of the pinned Pyodide
// version, or a directory laid out the same way), and the wheels of a
// wheelhouse directory.
//
// Workers never fetch or write anything themselves. A worker tells the
// supervisor what a call imports (or what its PEP 723 block requires); the
// supervisor resolves that here to files in the cache, each checked against
// its SHA-256 (from the lock file, or of the wheelhouse's file) and
// read-only, and the worker loads them from there:
//
//	r, err := packages.New(packages.Options{CacheDir: dir, BundledLock: lock})
//	files, err := r.Resolve(ctx, packages.Request{Imports: []string{"numpy"}})
//	// files[i].Path is a verified wheel in dir; dependencies come first
package packages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pep440 "github.com/aquasecurity/go-pep440-version"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/singleflight"
)

// DefaultIndex is the Pyodide CDN's folder for a Pyodide version.
func DefaultIndex(pyodideVersion string) string {
	return "https://cdn.jsdelivr.net/pyodide/v" + pyodideVersion + "/full/"
}

// Options configure a Resolver. The zero value of each field means its default.
type Options struct {
	// CacheDir is where fetched files are kept, one folder per SHA-256.
	// Workers may read it; only the Resolver writes it. Required.
	CacheDir string
	// Index is the package index: a URL or a directory holding a
	// pyodide-lock.json and the files it lists. "": DefaultIndex(Pyodide).
	Index string
	// BundledLock is the runtime's own pyodide-lock.json, which lists the
	// packages of the default index. Required when Index is "".
	BundledLock string
	// Pyodide is the runtime's Pyodide version, for DefaultIndex.
	Pyodide string
	// Python is the workers' Python version (for markers and
	// requires-python). "": the lock file's.
	Python string
	// Wheelhouse is a directory of wheels. "": none.
	Wheelhouse string
	// PyPI is the base URL of a JSON API like PyPI's (DefaultPyPI), asked
	// for requirements that neither the index nor the wheelhouse meets.
	// "": never asked.
	PyPI string
	// Offline refuses every download: packages come only from a local
	// index and the wheelhouse (--network none).
	Offline bool
	// Client fetches from a URL index. nil: one with connect timeouts.
	Client *http.Client
	// Log receives what the Resolver fetches. nil: none.
	Log hclog.Logger
}

// defaultPython is the workers' Python when neither the runtime nor the
// lock file says (markers and PyPI's requires-python need one).
const defaultPython = "3.14.2"

// maxDownload bounds one fetched file; the largest Pyodide packages are
// tens of MiB.
const maxDownload = 512 << 20

// ErrLoadedConflict marks a request that needs another version of a
// package the worker has loaded already: Python cannot unload it.
var ErrLoadedConflict = errors.New("another version is loaded in this worker")

// Resolver turns what calls import or require into files in the cache.
// Safe for concurrent use.
type Resolver struct {
	opt    Options
	index  string // URL ending in / or a directory
	client *http.Client
	log    hclog.Logger
	fetchG singleflight.Group

	pypiBase string // ends in /; "": PyPI is not asked

	mu       sync.Mutex
	pypi     map[string]pypiEntry // by normalized name
	dist     *distribution        // nil until read
	bundled  map[string]string    // the runtime's lock file's modules, once needed
	distErr  error
	distAt   time.Time
	wheels   wheelhouse
	verified map[string]time.Time // cache paths checked, by path, with their mtime
}

// File is a package a worker is to load.
type File struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Path    string   `json:"path"`
	Imports []string `json:"imports,omitempty"`
}

// Request is what a call needs.
type Request struct {
	// Imports are top-level modules the code imports that the worker
	// cannot import now. Names no package provides are left alone: the
	// code's own modules, typos (Python reports them when it runs).
	Imports []string
	// Requires are PEP 508 requirements (a PEP 723 block's dependencies,
	// --deps); every one must be met.
	Requires []string
	// RequiresPython is a PEP 723 block's requires-python; "" for any.
	RequiresPython string
	// By says who requires Requires, for errors. "": "the script".
	By string
	// Loaded are the packages the worker has loaded, by normalized name,
	// with their versions: met already, and fixed.
	Loaded map[string]string
}

// New returns a Resolver. It reads nothing until the first Resolve.
func New(opt Options) (*Resolver, error) {
	if opt.CacheDir == "" {
		return nil, errors.New("packages: no cache directory")
	}
	r := &Resolver{opt: opt, log: opt.Log, client: opt.Client, verified: map[string]time.Time{}, pypi: map[string]pypiEntry{}}
	if opt.PyPI != "" && !opt.Offline {
		r.pypiBase = strings.TrimSuffix(opt.PyPI, "/") + "/"
	}
	if r.log == nil {
		r.log = hclog.NewNullLogger()
	}
	switch {
	case opt.Index == "":
		if opt.BundledLock == "" {
			return nil, errors.New("packages: the default index needs the runtime's pyodide-lock.json")
		}
		r.index = DefaultIndex(opt.Pyodide)
	case IsURL(opt.Index):
		r.index = strings.TrimSuffix(opt.Index, "/") + "/"
	default:
		abs, err := filepath.Abs(opt.Index)
		if err != nil {
			return nil, fmt.Errorf("package index: %w", err)
		}
		r.index = abs
	}
	if opt.Wheelhouse != "" {
		abs, err := filepath.Abs(opt.Wheelhouse)
		if err != nil {
			return nil, fmt.Errorf("wheelhouse: %w", err)
		}
		r.wheels.dir = abs
	}
	if r.client == nil {
		r.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		}}
	}
	return r, nil
}

// Index is the package index in use: a URL or a directory.
func (r *Resolver) Index() string { return r.index }

// Resolve finds the packages req needs and not loaded yet, with their
// dependencies, and puts their files in the cache. Dependencies come before
// the packages that need them. An error names the package and why it
// cannot be had.
func (r *Resolver) Resolve(ctx context.Context, req Request) ([]File, error) {
	dist, distErr := r.distribution(ctx)
	wheels, wheelImports, err := r.scanWheels()
	if err != nil {
		return nil, err
	}
	python := r.opt.Python
	if python == "" && dist != nil {
		python = dist.python
	}
	env := markerEnv(cmpOr(python, defaultPython))
	if req.RequiresPython != "" && python != "" {
		spec, err := pep440.NewSpecifiers(req.RequiresPython)
		if err != nil {
			return nil, fmt.Errorf("requires-python %q: %v", req.RequiresPython, err)
		}
		if v, err := pep440.Parse(python); err == nil && !spec.Check(v) {
			return nil, fmt.Errorf("the script requires Python %s; the workers run Python %s", req.RequiresPython, python)
		}
	}
	var wants []want
	for _, s := range req.Requires {
		rq, err := ParseRequirement(s)
		if err != nil {
			return nil, err
		}
		by := cmpOr(req.By, "the script")
		wants = append(wants, want{req: rq, by: by, root: by})
	}
	for _, imp := range req.Imports {
		name, ok := wheelImports[imp]
		if !ok && dist != nil {
			name, ok = dist.imports[imp]
		}
		if !ok {
			if distErr != nil && r.distributionModule(imp) {
				return nil, fmt.Errorf("import %s: %w", imp, distErr)
			}
			continue // the code's own module, or a typo: Python will say
		}
		wants = append(wants, want{req: Requirement{Name: name}, by: "import " + imp, root: "import " + imp})
	}
	s := &solver{
		ctx: ctx, r: r, python: cmpOr(python, defaultPython),
		dist: dist, distErr: distErr, wheels: wheels, loaded: req.Loaded, env: env,
		chosen: map[string]*candidate{}, why: map[string]want{},
	}
	for _, w := range wants {
		if err := s.add(w, 0); err != nil {
			return nil, err
		}
	}
	files := make([]File, 0, len(s.order))
	for _, c := range s.order {
		p, err := r.fetch(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s %s%s: %w", c.display, c.version, s.why[c.name].neededFor(), err)
		}
		if c.lazy && c.imports == nil {
			// PyPI does not say which modules a wheel holds: the wheel does.
			if w, err := readWheel(p); err == nil {
				c.imports = w.imports
			}
		}
		files = append(files, File{Name: c.name, Version: c.version, Path: p, Imports: c.imports})
	}
	return files, nil
}

// want is a requirement and who asked for it, for errors: by is the
// package that depends on it, or root; root is what the call asked for
// ("import matplotlib", "the script").
type want struct {
	req      Requirement
	by, root string
}

// neededFor says why a package is fetched, so that a failed download of a
// dependency names what the call asked for: " (for import numpy)",
// " (needed by matplotlib 3.8.4, for import matplotlib)".
func (w want) neededFor() string {
	switch {
	case w.root == "":
		return ""
	case w.by == w.root:
		return " (for " + w.root + ")"
	}
	return " (needed by " + w.by + ", for " + w.root + ")"
}

// solver picks one version of every package a request needs: the highest
// that meets every requirement seen so far, without backtracking.
type solver struct {
	ctx     context.Context
	r       *Resolver
	python  string
	dist    *distribution
	distErr error
	wheels  map[string][]*candidate
	loaded  map[string]string
	env     map[string]string
	chosen  map[string]*candidate
	why     map[string]want // why each chosen package is needed, by name
	order   []*candidate    // dependencies first
}

func (s *solver) add(w want, depth int) error {
	rq := w.req
	if !rq.applies(s.env) {
		return nil
	}
	if depth > 64 {
		return fmt.Errorf("%s: dependencies nest more than 64 deep", rq.Name)
	}
	loaded, isLoaded := s.loaded[rq.Name]
	if isLoaded && rq.allows(loaded) {
		return nil
	}
	if c, ok := s.chosen[rq.Name]; ok {
		if rq.allows(c.version) {
			return nil
		}
		return fmt.Errorf("%s (needed by %s) conflicts with %s %s, chosen for another requirement", rq, w.by, c.display, c.version)
	}
	var all []*candidate
	all = append(all, s.wheels[rq.Name]...)
	if s.dist != nil {
		if c, ok := s.dist.byName[rq.Name]; ok {
			all = append(all, c)
		}
	}
	if len(all) == 0 && s.r.pypiBase != "" {
		var err error
		if all, err = s.r.fromPyPI(s.ctx, rq.Name, s.python); err != nil {
			return fmt.Errorf("%s (needed by %s): %w", rq.Name, w.by, err)
		}
	}
	if len(all) == 0 {
		if s.distErr != nil {
			return fmt.Errorf("%s (needed by %s): %w", rq.Name, w.by, s.distErr)
		}
		where := "the package index or the wheelhouse"
		if s.r.pypiBase != "" {
			where = "the package index, the wheelhouse or " + s.r.pypiBase
		}
		return fmt.Errorf("%s (needed by %s): no such package in %s", rq.Name, w.by, where)
	}
	var best *candidate
	var bestV pep440.Version
	for _, c := range all {
		if !rq.allows(c.version) {
			continue
		}
		v, err := pep440.Parse(c.version)
		if err != nil {
			continue
		}
		if best == nil || v.GreaterThan(bestV) {
			best, bestV = c, v
		}
	}
	if best == nil {
		var have []string
		for _, c := range all {
			have = append(have, c.version+" ("+c.from+")")
		}
		return fmt.Errorf("%s (needed by %s) cannot be satisfied: there is %s", rq, w.by, strings.Join(have, ", "))
	}
	if isLoaded {
		return fmt.Errorf("%s (needed by %s): %s %s is loaded in this worker already: %w",
			rq, w.by, rq.Name, loaded, ErrLoadedConflict)
	}
	if best.lazy {
		reqs, err := s.r.pypiRequires(s.ctx, best)
		if err != nil {
			return fmt.Errorf("%s (needed by %s): %w", rq, w.by, err)
		}
		// A copy: the listing is shared by concurrent requests.
		c := *best
		c.requires, best = reqs, &c
	}
	s.chosen[rq.Name], s.why[rq.Name] = best, w
	for _, dep := range best.requires {
		if err := s.add(want{req: dep, by: best.display + " " + best.version, root: w.root}, depth+1); err != nil {
			return err
		}
	}
	s.order = append(s.order, best)
	return nil
}

// distribution reads the index's lock file once; a URL index whose lock
// file could not be fetched is tried again after a minute.
func (r *Resolver) distribution(ctx context.Context) (*distribution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dist != nil || r.distErr != nil && time.Since(r.distAt) < time.Minute {
		return r.dist, r.distErr
	}
	var b []byte
	var err error
	switch {
	case r.opt.Index == "":
		b, err = os.ReadFile(r.opt.BundledLock)
	case IsURL(r.index):
		b, err = r.download(ctx, r.index+"pyodide-lock.json", 64<<20)
	default:
		b, err = os.ReadFile(filepath.Join(r.index, "pyodide-lock.json"))
	}
	if err == nil {
		r.dist, err = parseLock(b, r.index)
	}
	if err != nil {
		if !errors.Is(err, ErrUnreachable) { // which names the index already
			err = fmt.Errorf("the package index %s cannot be read: %w", r.index, err)
		}
		r.distErr, r.distAt = err, time.Now()
		return nil, r.distErr
	}
	return r.dist, nil
}

// distributionModule reports whether a module belongs to a package of the
// Pyodide distribution as the runtime's own lock file lists it: while a
// mirror's lock file cannot be read, an import of numpy is its failure, an
// import of the code's own module is not.
func (r *Resolver) distributionModule(imp string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bundled == nil {
		r.bundled = map[string]string{}
		if b, err := os.ReadFile(r.opt.BundledLock); err == nil {
			if d, err := parseLock(b, ""); err == nil {
				r.bundled = d.imports
			}
		}
	}
	_, ok := r.bundled[imp]
	return ok
}

func (r *Resolver) scanWheels() (map[string][]*candidate, map[string]string, error) {
	if r.wheels.dir == "" {
		return nil, nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wheels.scan()
}

// fetch puts c's file in the cache, checked, and returns its path there.
func (r *Resolver) fetch(ctx context.Context, c *candidate) (string, error) {
	if len(c.sha256) != 64 || strings.Trim(c.sha256, "0123456789abcdef") != "" {
		return "", errors.New("the package index gives no SHA-256 for it")
	}
	if c.fileName == "" || c.fileName == "." || c.fileName == ".." || strings.ContainsAny(c.fileName, `/\`) {
		return "", fmt.Errorf("its file name %q is not a file name", c.fileName)
	}
	dst := filepath.Join(r.opt.CacheDir, c.sha256, c.fileName)
	if r.cached(dst, c.sha256) {
		return dst, nil
	}
	_, err, _ := r.fetchG.Do(dst, func() (any, error) {
		if r.cached(dst, c.sha256) {
			return nil, nil
		}
		return nil, r.store(ctx, c, dst)
	})
	if err != nil {
		return "", err
	}
	return dst, nil
}

// cached reports whether dst holds the file with the given checksum, hashing
// it once per Resolver (and again if it changes).
func (r *Resolver) cached(dst, sum string) bool {
	st, err := os.Stat(dst)
	if err != nil {
		return false
	}
	r.mu.Lock()
	at, ok := r.verified[dst]
	r.mu.Unlock()
	if ok && at.Equal(st.ModTime()) {
		return true
	}
	got, err := hashFile(dst)
	if err != nil || got != sum {
		r.log.Warn("a cached package file does not match its checksum; fetching it again", "path", dst)
		_ = os.Chmod(dst, 0o644)
		_ = os.Remove(dst)
		return false
	}
	r.mu.Lock()
	r.verified[dst] = st.ModTime()
	r.mu.Unlock()
	return true
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// store copies or downloads c's file to dst, read-only, if its checksum
// matches.
func (r *Resolver) store(ctx context.Context, c *candidate, dst string) error {
	began := time.Now()
	var src io.ReadCloser
	if IsURL(c.source) {
		if r.opt.Offline {
			return fmt.Errorf("it would be downloaded from %s, and the network mode is none: use a --package-index directory or a --wheelhouse", c.source)
		}
		resp, err := r.get(ctx, c.source, c.from == "PyPI")
		if err != nil {
			return err
		}
		src = resp
	} else {
		f, err := os.Open(c.source)
		if err != nil {
			return fmt.Errorf("open %s: %w", c.source, err)
		}
		src = f
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*")
	if err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(src, maxDownload+1))
	if err != nil {
		return fmt.Errorf("fetch %s: %w", c.source, err)
	}
	if n > maxDownload {
		return fmt.Errorf("fetch %s: larger than %d MiB", c.source, maxDownload>>20)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != c.sha256 {
		return fmt.Errorf("%s has SHA-256 %s, and %s says %s: refusing it", c.source, got, c.from, c.sha256)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	if st, err := os.Stat(dst); err == nil {
		r.mu.Lock()
		r.verified[dst] = st.ModTime()
		r.mu.Unlock()
	}
	r.log.Info("package cached", "package", c.display, "version", c.version, "from", c.source,
		"bytes", n, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// get opens a URL for reading; the caller closes the body. pypi: the URL
// is PyPI's, for errors.
func (r *Resolver) get(ctx context.Context, url string, pypi bool) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.do(ctx, req, pypi)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

func (r *Resolver) download(ctx context.Context, url string, max int64) ([]byte, error) {
	if r.opt.Offline {
		return nil, fmt.Errorf("the package index is a URL, and the network mode is none: use a --package-index directory or a --wheelhouse")
	}
	body, err := r.get(ctx, url, r.pypiBase != "" && strings.HasPrefix(url, r.pypiBase))
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("fetch %s: larger than %d MiB", url, max>>20)
	}
	return b, nil
}

package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	pep440 "github.com/aquasecurity/go-pep440-version"
)

// DefaultPyPI is PyPI's JSON API.
const DefaultPyPI = "https://pypi.org/pypi/"

// pypiProject is the part of PyPI's JSON API answer that pyrun reads, for
// /pypi/<project>/json and /pypi/<project>/<version>/json alike.
type pypiProject struct {
	Info struct {
		Name         string   `json:"name"`
		RequiresDist []string `json:"requires_dist"`
	} `json:"info"`
	Releases map[string][]pypiFile `json:"releases"`
}

type pypiFile struct {
	Filename       string            `json:"filename"`
	URL            string            `json:"url"`
	Digests        map[string]string `json:"digests"`
	PackageType    string            `json:"packagetype"`
	RequiresPython string            `json:"requires_python"`
	Yanked         bool              `json:"yanked"`
}

// pypiEntry is a project's candidates as PyPI lists them, kept a while.
type pypiEntry struct {
	at    time.Time
	cands []*candidate
	err   error
}

// pypiTTL is how long a project's listing is kept.
const pypiTTL = 10 * time.Minute

// fromPyPI lists the versions of a project on PyPI that a Pyodide worker
// can install: a pure-Python wheel (or one built for Pyodide), not yanked,
// for the workers' Python. Their requirements are read when one is chosen.
func (r *Resolver) fromPyPI(ctx context.Context, name, python string) ([]*candidate, error) {
	r.mu.Lock()
	e, ok := r.pypi[name]
	r.mu.Unlock()
	if ok && time.Since(e.at) < pypiTTL {
		return e.cands, e.err
	}
	cands, err := r.listPyPI(ctx, name, python)
	if ctx.Err() == nil { // a call that ran out of time says nothing of PyPI
		r.mu.Lock()
		r.pypi[name] = pypiEntry{at: time.Now(), cands: cands, err: err}
		r.mu.Unlock()
	}
	return cands, err
}

func (r *Resolver) listPyPI(ctx context.Context, name, python string) ([]*candidate, error) {
	b, err := r.download(ctx, r.pypiBase+url.PathEscape(name)+"/json", 64<<20)
	if err != nil {
		if strings.Contains(err.Error(), "404 Not Found") {
			return nil, nil
		}
		if errors.Is(err, ErrUnreachable) { // which says PyPI already
			return nil, err
		}
		return nil, fmt.Errorf("PyPI: %w", err)
	}
	var proj pypiProject
	if err := json.Unmarshal(b, &proj); err != nil {
		return nil, fmt.Errorf("PyPI's answer for %s: %w", name, err)
	}
	pyv, _ := pep440.Parse(python)
	var out []*candidate
	for version, files := range proj.Releases {
		for _, f := range files {
			if f.PackageType != "bdist_wheel" || f.Yanked || len(f.Digests["sha256"]) != 64 || !installable(f.Filename) {
				continue
			}
			if f.RequiresPython != "" && python != "" {
				if spec, err := pep440.NewSpecifiers(f.RequiresPython); err == nil && !spec.Check(pyv) {
					continue
				}
			}
			out = append(out, &candidate{
				name: name, display: cmpOr(proj.Info.Name, name), version: version,
				fileName: path.Base(f.Filename), source: f.URL, sha256: strings.ToLower(f.Digests["sha256"]),
				from: "PyPI", lazy: true,
			})
			break // one wheel a version
		}
	}
	return out, nil
}

// installable says whether a wheel's tags suit a Pyodide worker.
func installable(fileName string) bool {
	parts := strings.Split(strings.TrimSuffix(fileName, ".whl"), "-")
	if !strings.HasSuffix(fileName, ".whl") || len(parts) != 5 && len(parts) != 6 {
		return false
	}
	py, abi, plat := parts[len(parts)-3], parts[len(parts)-2], parts[len(parts)-1]
	if abi == "none" && plat == "any" {
		return strings.Contains(py, "py3")
	}
	return strings.Contains(plat, "emscripten") || strings.Contains(plat, "pyodide")
}

// pypiRequires reads the requirements of the chosen version of a PyPI
// project.
func (r *Resolver) pypiRequires(ctx context.Context, c *candidate) ([]Requirement, error) {
	b, err := r.download(ctx, r.pypiBase+url.PathEscape(c.name)+"/"+url.PathEscape(c.version)+"/json", 64<<20)
	if errors.Is(err, ErrUnreachable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("PyPI: %w", err)
	}
	var proj pypiProject
	if err := json.Unmarshal(b, &proj); err != nil {
		return nil, fmt.Errorf("PyPI's answer for %s %s: %w", c.name, c.version, err)
	}
	var reqs []Requirement
	for _, s := range proj.Info.RequiresDist {
		rq, err := ParseRequirement(s)
		if err != nil {
			return nil, fmt.Errorf("%s %s on PyPI: Requires-Dist: %w", c.display, c.version, err)
		}
		reqs = append(reqs, rq)
	}
	return reqs, nil
}

package packages

import (
	"fmt"
	"regexp"
	"strings"

	pep440 "github.com/aquasecurity/go-pep440-version"
)

// Requirement is one parsed PEP 508 requirement, such as `attrs>=23,<25`
// or `tomli; python_version < "3.11"`.
type Requirement struct {
	Name      string // normalized (PEP 503)
	Specifier string // "" for any version
	Marker    string // "" for always
	spec      *pep440.Specifiers
}

var (
	nameRe    = regexp.MustCompile(`^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*`)
	normRe    = regexp.MustCompile(`[-_.]+`)
	extrasRe  = regexp.MustCompile(`^\[[^\]]*\]\s*`)
	parenSpec = regexp.MustCompile(`^\((.*)\)$`)
)

// Normalize is a distribution name as PEP 503 compares it.
func Normalize(name string) string {
	return normRe.ReplaceAllString(strings.ToLower(name), "-")
}

// ParseRequirement parses a PEP 508 requirement. Extras are accepted and
// ignored (pyrun installs a package's own dependencies, not its extras);
// direct URL references are refused: pyrun installs only from its index and
// wheelhouse.
func ParseRequirement(s string) (Requirement, error) {
	rest, marker, _ := strings.Cut(s, ";")
	m := nameRe.FindStringSubmatch(rest)
	if m == nil {
		return Requirement{}, fmt.Errorf("%q is not a requirement: it must start with a package name", s)
	}
	r := Requirement{Name: Normalize(m[1]), Marker: strings.TrimSpace(marker)}
	rest = rest[len(m[0]):]
	rest = extrasRe.ReplaceAllString(rest, "")
	rest = strings.TrimSpace(rest)
	if strings.HasPrefix(rest, "@") {
		return Requirement{}, fmt.Errorf("%q: direct references (name @ url) are not supported; put the wheel in the wheelhouse", s)
	}
	if pm := parenSpec.FindStringSubmatch(rest); pm != nil {
		rest = strings.TrimSpace(pm[1])
	}
	if rest != "" {
		spec, err := pep440.NewSpecifiers(rest)
		if err != nil {
			return Requirement{}, fmt.Errorf("%q: bad version specifier %q: %v", s, rest, err)
		}
		r.Specifier, r.spec = rest, &spec
	}
	if r.Marker != "" {
		if _, err := evalMarker(r.Marker, markerEnv(defaultPython)); err != nil {
			return Requirement{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	return r, nil
}

// String is the requirement as PEP 508 writes it, without its marker.
func (r Requirement) String() string { return r.Name + r.Specifier }

// allows reports whether version v satisfies the specifier.
func (r Requirement) allows(v string) bool {
	if r.spec == nil {
		return true
	}
	pv, err := pep440.Parse(v)
	if err != nil {
		return false
	}
	return r.spec.Check(pv)
}

// applies reports whether the marker holds in env (markerEnv).
func (r Requirement) applies(env map[string]string) bool {
	if r.Marker == "" {
		return true
	}
	ok, err := evalMarker(r.Marker, env)
	return err == nil && ok
}

// markerEnv is what PEP 508 markers see in a worker with Python python
// (such as "3.14.2").
func markerEnv(python string) map[string]string {
	short := python
	if parts := strings.SplitN(python, ".", 3); len(parts) >= 2 {
		short = parts[0] + "." + parts[1]
	}
	return map[string]string{
		"os_name":                        "posix",
		"sys_platform":                   "emscripten",
		"platform_system":                "Emscripten",
		"platform_machine":               "wasm32",
		"platform_python_implementation": "CPython",
		"implementation_name":            "cpython",
		"platform_release":               "",
		"platform_version":               "",
		"python_version":                 short,
		"python_full_version":            python,
		"implementation_version":         python,
		"extra":                          "", // extras are never requested
	}
}

// markerTokens splits a PEP 508 marker into its tokens.
var markerTokens = regexp.MustCompile(`\s*("[^"]*"|'[^']*'|\(|\)|===|==|!=|~=|<=|>=|<|>|not\s+in\b|in\b|and\b|or\b|[A-Za-z_][A-Za-z0-9_.]*)`)

// evalMarker evaluates a PEP 508 environment marker in env.
func evalMarker(s string, env map[string]string) (bool, error) {
	var toks []string
	rest := s
	for strings.TrimSpace(rest) != "" {
		m := markerTokens.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return false, fmt.Errorf("bad environment marker %q", s)
		}
		toks = append(toks, rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}
	p := &markerParser{toks: toks, env: env}
	v, err := p.or()
	if err == nil && p.i < len(toks) {
		err = fmt.Errorf("bad environment marker %q: unexpected %q", s, toks[p.i])
	}
	if err != nil {
		return false, err
	}
	return v, nil
}

type markerParser struct {
	toks []string
	i    int
	env  map[string]string
}

func (p *markerParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *markerParser) or() (bool, error) {
	v, err := p.and()
	for err == nil && p.peek() == "or" {
		p.i++
		var w bool
		w, err = p.and()
		v = v || w
	}
	return v, err
}

func (p *markerParser) and() (bool, error) {
	v, err := p.atom()
	for err == nil && p.peek() == "and" {
		p.i++
		var w bool
		w, err = p.atom()
		v = v && w
	}
	return v, err
}

func (p *markerParser) atom() (bool, error) {
	if p.peek() == "(" {
		p.i++
		v, err := p.or()
		if err != nil {
			return false, err
		}
		if p.peek() != ")" {
			return false, fmt.Errorf("bad environment marker: missing )")
		}
		p.i++
		return v, nil
	}
	if p.i+3 > len(p.toks) {
		return false, fmt.Errorf("bad environment marker: incomplete comparison")
	}
	lhs, op, rhs := p.toks[p.i], p.toks[p.i+1], p.toks[p.i+2]
	p.i += 3
	l, lvar, err := p.value(lhs)
	if err != nil {
		return false, err
	}
	r, rvar, err := p.value(rhs)
	if err != nil {
		return false, err
	}
	op = strings.Join(strings.Fields(op), " ")
	switch op {
	case "in":
		return strings.Contains(r, l), nil
	case "not in":
		return !strings.Contains(r, l), nil
	}
	versions := strings.HasSuffix(lvar, "version") || strings.HasSuffix(rvar, "version")
	if versions {
		if op == "===" {
			return l == r, nil
		}
		// A specifier is the operator and the right side's version.
		if lvar == "" { // "3.8" < python_version: turn it around
			l, r, op = r, l, flipped(op)
		}
		spec, err := pep440.NewSpecifiers(op + r)
		if err != nil {
			return false, fmt.Errorf("bad environment marker: %v", err)
		}
		v, err := pep440.Parse(l)
		if err != nil {
			return false, nil
		}
		return spec.Check(v), nil
	}
	switch op {
	case "==", "===":
		return l == r, nil
	case "!=":
		return l != r, nil
	case "<":
		return l < r, nil
	case "<=":
		return l <= r, nil
	case ">":
		return l > r, nil
	case ">=":
		return l >= r, nil
	}
	return false, fmt.Errorf("bad environment marker: operator %q", op)
}

// flipped is the operator that holds for (b, a) when op holds for (a, b).
func flipped(op string) string {
	switch op {
	case "<":
		return ">"
	case ">":
		return "<"
	case "<=":
		return ">="
	case ">=":
		return "<="
	}
	return op
}

// value is a token's value, and the variable it names if it is one.
func (p *markerParser) value(tok string) (value, variable string, err error) {
	if len(tok) >= 2 && (tok[0] == '"' || tok[0] == '\'') {
		return tok[1 : len(tok)-1], "", nil
	}
	v, ok := p.env[tok]
	if !ok {
		return "", "", fmt.Errorf("bad environment marker: unknown variable %q", tok)
	}
	return v, tok, nil
}

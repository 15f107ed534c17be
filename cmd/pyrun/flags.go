package main

// How pyrun reads its command line: the flag package's parser, with errors
// that say what to do instead of "parse error", and the flag values of its
// own (sizes, lists, mounts).

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/supervisor"
)

// durationFlag is a duration flag whose errors say what a duration looks
// like: Go's own says only "parse error", and "--timeout 5" (seconds, the
// user meant) deserves better. It wraps the flag package's value, so the
// flag keeps its default and its String.
type durationFlag struct{ flag.Value }

func (d *durationFlag) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		if _, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
			return fmt.Errorf("a duration needs a unit, e.g. %ss (or 500ms, 2m, 1h)", strings.TrimSpace(s))
		}
		return fmt.Errorf("not a duration: use a number and a unit, e.g. 5s, 500ms, 2m or 1h")
	}
	return d.Value.Set(s)
}

// String is safe on the zero value: the flag package makes one to learn a
// flag's zero default.
func (d *durationFlag) String() string {
	if d == nil || d.Value == nil {
		return ""
	}
	return d.Value.String()
}

// Get is the duration, as for the flag package's own duration flags.
func (d *durationFlag) Get() any { return d.Value.(flag.Getter).Get() }

// explainDurations makes every duration flag of fs a durationFlag: one
// place, whichever file declares the flag.
func explainDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = &durationFlag{f.Value}
			}
		}
	})
}

// parseInterleaved parses the flags in args wherever they stand among the
// positional arguments, which it returns in order: `pyrun run file.py
// --timeout 1s` means what `pyrun run --timeout 1s file.py` does. The flag
// package alone stops at the first positional argument and would take the
// flags after it for more files. After "--" every argument is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if endedFlags(fs, args[:len(args)-len(rest)]) {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// endedFlags says whether the arguments fs.Parse consumed end with the
// "--" that ends the flags, rather than with a flag's value that is "--".
func endedFlags(fs *flag.FlagSet, consumed []string) bool {
	n := len(consumed)
	if n == 0 || consumed[n-1] != "--" {
		return false
	}
	if n == 1 {
		return true
	}
	prev := consumed[n-2]
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return true
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return true
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag() // a bool flag takes no value: "--" ended the flags
}

// invalidValue matches the flag package's error for a value its flag
// refused (flag.go, parseOne), which it does not wrap.
var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)

// notDefined matches the flag package's error for a flag it does not know.
var notDefined = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)

// explainFlagError rewrites the flag package's error err, met parsing
// cmd's flags fs, as the command line spelled it, saying what to type:
// `--timeout 5: a duration needs a unit, e.g. 5s (or 500ms, 2m, 1h)`,
// `unknown flag --timout: did you mean --timeout?`.
func explainFlagError(cmd string, fs *flag.FlagSet, err error) error {
	if m := notDefined.FindStringSubmatch(err.Error()); m != nil {
		if near := nearestFlag(cmd, fs, m[1]); near != "" {
			return fmt.Errorf("unknown flag --%s: did you mean --%s?", m[1], near)
		}
		return fmt.Errorf("unknown flag --%s (pyrun %s --help lists its flags)", m[1], cmd)
	}
	m := invalidValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	value, name, why := m[1], m[2], m[3]
	if why == "parse error" || why == "value out of range" {
		why = fmt.Sprintf("%s is not a number (or out of range)", strconv.Quote(value))
	}
	return fmt.Errorf("--%s %s: %s", name, value, why)
}

// nearestFlag is the flag of fs nearest to name by edit distance, cmd's
// own before the others at the same distance; "" when none is near
// enough to be what was meant (more than a third of its letters differ).
func nearestFlag(cmd string, fs *flag.FlagSet, name string) string {
	own := commandFlags(cmd)
	best, bestDist := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		d := 2 * editDistance(name, f.Name)
		if !slices.Contains(own, f.Name) {
			d++ // another command's flag loses a tie
		}
		if best == "" || d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" || bestDist/2 > max(1, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b: the fewest
// letters inserted, removed or changed to make one the other.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			change := 1
			if a[i-1] == b[j-1] {
				change = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+change)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quietLogs sets the log level of `pyrun run` and `pyrun warmup` to warn
// unless --log-level (or the config file's log_level) gives one: their
// output is for a person at a terminal, where info lines on stderr would
// be mixed into it.
func quietLogs(cmd string, fs *flag.FlagSet, o *options) {
	if cmd != "run" && cmd != "warmup" {
		return
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "log-level" })
	if !given {
		o.logLevel = "warn"
	}
}

// nearestCommand is ": did you mean CMD?" for the command nearest to a
// mistyped one, or "".
func nearestCommand(typed string) string {
	best, bestDist := "", 0
	for _, c := range []string{"stdio", "serve", "warmup", "run", "version"} {
		if d := editDistance(typed, c); best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist > max(1, len(typed)/3) {
		return ""
	}
	return ": did you mean " + best + "?"
}

// byteSize is a flag holding a size: a plain number of bytes or a number
// with a unit (KB, MB, GB in powers of 1000; KiB, MiB, GiB in powers of 1024).
type byteSize int64

func (b *byteSize) Set(s string) error {
	v, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func (b byteSize) String() string { return bytesize.Format(int64(b)) }

// Bytes marks the flag as a size, as bytesize.Value does.
func (b byteSize) Bytes() int64 { return int64(b) }

// stringList is a comma-separated list flag.
type stringList []string

func (l *stringList) Set(s string) error {
	*l = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

func (l stringList) String() string { return strings.Join(l, ",") }

// mountsVar is the --mount flag, bound to the pools' mounts:
// HOST_DIR:SANDBOX_DIR[:rw], repeated or separated by commas. A repeated
// flag adds to the list; two mounts may not share a sandbox path.
type mountsVar struct{ p *[]supervisor.Mount }

func (v mountsVar) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		m, err := supervisor.ParseMount(part)
		if err != nil {
			return err
		}
		for _, had := range *v.p {
			if had.Path == m.Path {
				return fmt.Errorf("mount %q: %s is mounted twice", part, m.Path)
			}
		}
		*v.p = append(*v.p, m)
	}
	return nil
}

// reset empties the list, for a value set again as a whole (a reload
// keeping the mounts pyrun started with: keepRestartOnly).
func (v mountsVar) reset() { *v.p = nil }

func (v mountsVar) String() string {
	if v.p == nil {
		return ""
	}
	var parts []string
	for _, m := range *v.p {
		s := m.Host + ":" + m.Path
		if m.RW {
			s += ":rw"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

// noneVar binds a count or size flag whose 0 means none to a package's
// field that spells none -1, its 0 being its default (supervisor.Config's
// WarmCalls, RestoreSpares; sessions.Limits' Spares; mcp.Options'
// AppCellBytes). The field holds its default before the flag is bound;
// Set refuses what is negative or past hi.
type noneVar[T int | int64] struct {
	p    *T
	hi   T
	size bool // bytes (64KiB), not a count
}

func noneCount(p *int, hi int) flag.Value { return noneCountVar{noneVar[int]{p: p, hi: hi}} }
func noneBytes(p *int64, hi int64) flag.Value {
	return noneBytesVar{noneVar[int64]{p: p, hi: hi, size: true}}
}

// noneCountVar is a count: its Get is the number as the flag takes it.
type noneCountVar struct{ noneVar[int] }

func (v noneCountVar) Get() any {
	if v.p == nil {
		return 0
	}
	return max(*v.p, 0)
}

// noneBytesVar is a size: Bytes marks it so for the help and the docs.
type noneBytesVar struct{ noneVar[int64] }

func (v noneBytesVar) Bytes() int64 {
	if v.p == nil {
		return 0
	}
	return max(*v.p, 0)
}

func (v noneVar[T]) format(n T) string {
	if v.size {
		return bytesize.Format(int64(n))
	}
	return strconv.FormatInt(int64(n), 10)
}

func (v noneVar[T]) Set(s string) error {
	var n int64
	var err error
	if v.size {
		n, err = bytesize.Parse(s)
	} else {
		n, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	}
	if err != nil {
		return err
	}
	if n < 0 || n > int64(v.hi) {
		return fmt.Errorf("must be between 0 (none) and %s", v.format(v.hi))
	}
	*v.p = T(n)
	if n == 0 {
		*v.p = -1
	}
	return nil
}

func (v noneVar[T]) String() string {
	if v.p == nil || *v.p < 0 {
		return "0"
	}
	return v.format(*v.p)
}

// noneDuration binds a duration flag whose 0 means never to a package's
// field that spells never -1, its 0 being its default (httpfront.Options'
// KeepAlive). Its Get makes it a duration flag (explainDurations).
type noneDuration struct{ p *time.Duration }

func (v noneDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("must not be negative (0: never)")
	}
	*v.p = d
	if d == 0 {
		*v.p = -1
	}
	return nil
}

func (v noneDuration) String() string {
	if v.p == nil || *v.p < 0 {
		return "0s"
	}
	return v.p.String()
}

func (v noneDuration) Get() any {
	if v.p == nil {
		return time.Duration(0)
	}
	return max(*v.p, 0)
}

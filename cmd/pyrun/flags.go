package main

// How pyrun reads its command line: the flag package's parser, with errors
// that say what to do instead of "parse error".

import (
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
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

// invalidValue matches the flag package's error for a value its flag
// refused (flag.go, parseOne), which it does not wrap.
var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)

// explainFlagError rewrites the flag package's error err as the command
// line spelled it: `--timeout 5: a duration needs a unit, e.g. 5s (or 500ms, 2m, 1h)`.
func explainFlagError(err error) error {
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

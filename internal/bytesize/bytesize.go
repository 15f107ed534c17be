// Package bytesize reads and writes sizes as pyrun's settings take them: a
// plain number of bytes or a number with a unit (KB, MB, GB in powers of
// 1000; KiB, MiB, GiB in powers of 1024), for the flags and config keys
// and for the packages whose configurations check them (Validate).
package bytesize

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

var units = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// Parse reads a size: 65536, 64KiB, 1.5GB.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := units[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("%q is not a size: use bytes or a unit such as 64KiB, 512MiB, 1GiB", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	v := f * float64(mult)
	if v > 1<<50 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// Format writes v in the largest binary unit that divides it (64KiB),
// else in bytes.
func Format(v int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v >= u.size && v%u.size == 0 {
			return fmt.Sprintf("%d%s", v/u.size, u.name)
		}
	}
	return strconv.FormatInt(v, 10)
}

// Value is a flag bound to a size field of a package's configuration.
type Value[T ~int | ~int64] struct{ p *T }

// Var is a flag.Value that sets *p; *p holds its default.
func Var[T ~int | ~int64](p *T) flag.Value { return Value[T]{p} }

func (v Value[T]) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*v.p = T(n)
	return nil
}

// Bytes is the size set, and marks the flag as a size (the help names its
// argument BYTES).
func (v Value[T]) Bytes() int64 { return int64(*v.p) }

func (v Value[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return Format(int64(*v.p))
}

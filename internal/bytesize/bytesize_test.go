package bytesize

import (
	"flag"
	"testing"
)

// Sizes read as the flags take them and write back in the largest unit
// that divides them; a flag bound to a field sets it.
func TestParseFormatAndVar(t *testing.T) {
	for in, want := range map[string]int64{"65536": 65536, "64KiB": 64 << 10, "1.5GB": 1500e6, "512 mib": 512 << 20, "2k": 2048} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "12 parsecs", "1e9GiB"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
	for v, want := range map[int64]string{0: "0", 1000: "1000", 64 << 10: "64KiB", 3 << 30: "3GiB", 1<<20 + 1: "1048577"} {
		if got := Format(v); got != want {
			t.Errorf("Format(%d) = %q, want %q", v, got, want)
		}
	}
	var field int
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(Var(&field), "size", "")
	if err := fs.Parse([]string{"--size", "8MiB"}); err != nil || field != 8<<20 || fs.Lookup("size").Value.String() != "8MiB" {
		t.Fatalf("--size 8MiB: %v, field %d", err, field)
	}
}

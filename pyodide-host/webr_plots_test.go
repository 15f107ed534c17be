package pyodidehost_test

import (
	"strings"
	"testing"
)

// A plot's text is drawn without a word from Fontconfig: R's thread had
// LANG from Deno's navigator.language, "en_US-u-va-posix.UTF-8" in a
// worker with no LANG of its own (as the supervisor starts it), and every
// worker's first text said "Fontconfig warning: ignoring
// en_US-u-va-posix.UTF-8: not a valid region tag" on stderr.
func TestRPlotsSayNothingOfFontconfig(t *testing.T) {
	w := startR(t, rConfig)
	evs := w.run("plot(1:10, main = 'a title'); text(5, 5, 'some text')\nSys.getenv('LANG')", nil)
	r := wantSuccess(t, evs, "plot with text")
	if out := output(evs, ""); strings.Contains(out, "Fontconfig") {
		t.Errorf("a plot's output: %q, want no Fontconfig warning", out)
	}
	if r.Value == nil || compactJSON(t, *r.Value) != `"en_US.UTF-8"` {
		t.Errorf("LANG in R: %v, want en_US.UTF-8", r.Value)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == "display" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d displays, want the plot's one", n)
	}
}

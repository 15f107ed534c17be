package pyodidehost_test

import (
	"bytes"
	"encoding/base64"
	"image/png"
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

// A plot the code writes to a file under /output/ comes back once, as
// that file, not also as a display of the same page: the MCP result had
// two images of one plot. Drawn again, unchanged, in a call that keeps
// /output/ (a session's), it comes back again. A plot to a file elsewhere
// is a display.
func TestRPlotToOutputIsOneFile(t *testing.T) {
	w := startR(t, rConfig)
	rich := func(evs []rEvent) string {
		var got []string
		for _, ev := range evs {
			if ev.Type == "display" || ev.Type == "file" {
				got = append(got, ev.Type+" "+ev.Path+" "+ev.MIMEType)
			}
		}
		return strings.Join(got, "; ")
	}
	evs := w.run("setwd('/output'); svg('a.svg'); plot(1); invisible(dev.off())\n"+
		"png('/tmp/elsewhere.png'); plot(2); invisible(dev.off()); plot(3)", nil)
	wantSuccess(t, evs, "plots to /output/ and elsewhere")
	if got, want := rich(evs), "display  image/png; display  image/png; file a.svg image/svg+xml"; got != want {
		t.Errorf("plots: %q, want %q", got, want)
	}
	code := "png('/output/plot.png'); plot(1:10); invisible(dev.off())"
	for i, extra := range []map[string]any{nil, {"keep_output": true}, {"keep_output": true}} {
		evs := w.run(code, extra)
		wantSuccess(t, evs, "plot to /output/")
		if got := rich(evs); got != "file plot.png image/png" {
			t.Errorf("call %d: %q, want one file event for plot.png", i+1, got)
		}
	}
}

// A plot with no device open becomes a PNG display; every page of every
// file device (png, svg) comes back too, and max_displays caps them.
func TestRPlots(t *testing.T) {
	w := startR(t, rConfig)
	evs := w.run("plot(1:10)", nil)
	wantSuccess(t, evs, "plot")
	var shown []rEvent
	for _, ev := range evs {
		if ev.Type == "display" {
			shown = append(shown, ev)
		}
	}
	if len(shown) != 1 || shown[0].MIMEType != "image/png" {
		t.Fatalf("plot(1:10): displays %+v, want one image/png", shown)
	}
	data, err := base64.StdEncoding.DecodeString(shown[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("display is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 672 || b.Dy() != 480 {
		t.Errorf("plot size %v, want 672x480", b)
	}

	evs = w.run("png('mine.png', width = 300, height = 300); plot(1); invisible(dev.off())\n"+
		"svg(); plot(1); plot(2)\nhist(rnorm(50))", nil)
	wantSuccess(t, evs, "devices")
	var mimes []string
	for _, ev := range evs {
		if ev.Type == "display" {
			mimes = append(mimes, ev.MIMEType)
		}
	}
	// svg() without onefile writes one file per page; hist() drew on the
	// open svg device.
	if got, want := strings.Join(mimes, ","), "image/png,image/svg+xml,image/svg+xml,image/svg+xml"; got != want {
		t.Errorf("displays %s, want %s", got, want)
	}

	evs = w.run("for (i in 1:5) plot(i)", map[string]any{"max_displays": 2})
	r := wantSuccess(t, evs, "capped")
	n := 0
	for _, ev := range evs {
		if ev.Type == "display" {
			n++
		}
	}
	if n != 2 || r.Held != 3 {
		t.Errorf("5 plots with max_displays 2: %d displays, %d dropped; want 2 and 3", n, r.Held)
	}
	// Devices are closed at the end of a call: the next call starts with none.
	r = wantSuccess(t, w.run("dev.cur()", nil), "dev.cur")
	if r.Value == nil || compactJSON(t, *r.Value) != `{"null device":1}` {
		t.Errorf("dev.cur() after a call: %v, want the null device", r.Value)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor/packages/packagestest"
)

// pngPy defines png(w, h): a real PNG of w x h red pixels, made with zlib.
const pngPy = `
import struct, zlib
def png(w, h):
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
`

// wantPNG checks that data is a PNG of w x h pixels.
func wantPNG(t *testing.T, what string, data []byte, w, h int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not a PNG: %v", what, err)
		return
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("%s: a %dx%d PNG, want %dx%d", what, b.Dx(), b.Dy(), w, h)
	}
}

// TestRichDisplays: PNG, SVG, HTML, markdown and mime-bundle displays come
// back as image, resource and text blocks after the text block, in the
// order shown; the text block lists them; structuredContent.displays
// matches.
func TestRichDisplays(t *testing.T) {
	s := shared.get(t)
	r := s.run(t, pngPy+`
class Svg:
    def _repr_svg_(self): return '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="2"/>'
class Html:
    def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
class Md:
    def _repr_markdown_(self): return "# Title\n*bold*"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": "B", "image/png": png(3, 2)}
class Png:
    def _repr_png_(self): return png(2, 1)
print("one")
display(Png())
display(Svg(), Html())
print("two")
display(Md())
Bundle()
`)
	wantStatus(t, r, "success")
	want := []string{"image/png", "image/svg+xml", "text/html", "text/markdown", "image/png"}
	if len(r.sc.Displays) != len(want) || len(r.rest) != len(want) {
		t.Fatalf("displays %+v, %d blocks after the text; want %v\n%s", r.sc.Displays, len(r.rest), want, r.text)
	}
	for i, m := range want {
		if r.sc.Displays[i].MIMEType != m || !strings.HasPrefix(r.sc.Displays[i].URI, "pyrun://display/") {
			t.Errorf("display %d: %+v, want %s", i, r.sc.Displays[i], m)
		}
	}
	if img, ok := r.rest[0].(*sdk.ImageContent); !ok || img.MIMEType != "image/png" {
		t.Errorf("block 1: %T, want a PNG image", r.rest[0])
	} else {
		wantPNG(t, "display 1", img.Data, 2, 1)
	}
	if res, ok := r.rest[1].(*sdk.EmbeddedResource); !ok || res.Resource.MIMEType != "image/svg+xml" ||
		!strings.HasPrefix(res.Resource.Text, "<svg") || res.Resource.URI != r.sc.Displays[1].URI {
		t.Errorf("block 2: %#v, want an embedded SVG resource", r.rest[1])
	}
	if res, ok := r.rest[2].(*sdk.EmbeddedResource); !ok || res.Resource.MIMEType != "text/html" || !strings.Contains(res.Resource.Text, "<table>") {
		t.Errorf("block 3: %#v, want an embedded HTML resource", r.rest[2])
	}
	if tc, ok := r.rest[3].(*sdk.TextContent); !ok || tc.Text != "# Title\n*bold*" {
		t.Errorf("block 4: %#v, want the markdown as text", r.rest[3])
	}
	if img, ok := r.rest[4].(*sdk.ImageContent); !ok {
		t.Errorf("block 5: %T, want the bundle's PNG", r.rest[4])
	} else {
		wantPNG(t, "the bundle's PNG", img.Data, 3, 2)
	}
	lines := itemLines(r.sections["displays"])
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "image/png ") || lines[3] != "text/markdown 14 bytes" {
		t.Errorf("<displays>: %q", r.sections["displays"])
	}
	if r.sc.Stdout != "one\ntwo\n" {
		t.Errorf("stdout %q", r.sc.Stdout)
	}
	// The value of the last expression keeps its <return_value> as before.
	r = s.run(t, "class Md:\n    def _repr_markdown_(self): return '*x*'\n    def __repr__(self): return 'Md()'\nMd()")
	wantValue(t, r, `"Md()"`)
	if len(r.sc.Displays) != 1 || r.sc.Displays[0].MIMEType != "text/markdown" {
		t.Errorf("a rich last expression: %+v", r.sc.Displays)
	}
	// Plain values show nothing more.
	r = s.run(t, "x = 1\n[x, 'a']")
	if len(r.rest) != 0 || len(r.sc.Displays) != 0 || strings.Contains(r.text, "<displays>") {
		t.Errorf("a plain last value: %+v\n%s", r.sc.Displays, r.text)
	}
}

// TestRichDisplayCaps: past --max-displays or --max-display-bytes the rest
// is dropped and the text says so; the text block stays first and whole.
func TestRichDisplayCaps(t *testing.T) {
	s := newServer(t, "--workers", "1", "--max-displays", "3", "--max-display-bytes", "2KiB")
	r := s.run(t, `
for i in range(5):
    display({"text/markdown": f"item {i}"}, raw=True)
print("done")`)
	wantStatus(t, r, "success")
	if len(r.sc.Displays) != 3 || len(r.rest) != 3 {
		t.Fatalf("displays %+v with a cap of 3", r.sc.Displays)
	}
	if !strings.Contains(r.sections["displays"], "[pyrun: 2 more displays were dropped") || r.sc.Stdout != "done\n" {
		t.Errorf("no note of the dropped displays:\n%s", r.text)
	}
	// Image files under /output/ are shown under the same caps; every file
	// still gets its link.
	r = s.run(t, pngPy+"for i in range(4):\n    open(f'/output/p{i}.png', 'wb').write(png(1, 1))")
	var images, links int
	for _, c := range r.rest {
		switch c.(type) {
		case *sdk.ImageContent:
			images++
		case *sdk.ResourceLink:
			links++
		}
	}
	if images != 3 || links != 4 || len(r.sc.Files) != 4 {
		t.Errorf("4 PNG files with --max-displays 3: %d images, %d links", images, links)
	}
	r = s.run(t, `display({"text/html": "x" * 1500}, raw=True); display({"text/html": "y" * 1500}, raw=True); display({"text/markdown": "small"}, raw=True)`)
	if len(r.sc.Displays) != 2 || r.sc.Displays[0].Bytes != 1500 || r.sc.Displays[1].MIMEType != "text/markdown" ||
		!strings.Contains(r.sections["displays"], "1 more display was dropped") {
		t.Errorf("byte cap of 2KiB: %+v\n%s", r.sc.Displays, r.text)
	}
}

// matplotlibStandIn is a stand-in for matplotlib with exactly the API pyrun
// uses: MPLBACKEND, matplotlib._pylab_helpers.Gcf.get_all_fig_managers()
// and destroy_all(), manager.canvas.figure.savefig(buf, format="png"), and
// pyplot.show. matplotlib itself cannot be loaded on this machine (no
// Pyodide build of it is reachable offline).
func matplotlibStandIn(t *testing.T) string {
	dir := t.TempDir()
	packagestest.Wheel{Name: "matplotlib", Version: "99.0", Files: map[string]string{
		"matplotlib/__init__.py": `import os
# Real matplotlib takes its backend from MPLBACKEND; in Pyodide the default
# one needs a browser page, which Deno has not.
_backend = os.environ.get("MPLBACKEND", "")
if _backend.lower() != "agg":
    raise ImportError("stand-in matplotlib: MPLBACKEND is %r, not Agg" % _backend)
def get_backend():
    return _backend
`,
		"matplotlib/_pylab_helpers.py": `class Gcf:
    figs = {}
    @classmethod
    def get_all_fig_managers(cls):
        return list(cls.figs.values())
    @classmethod
    def destroy_all(cls):
        cls.figs.clear()
`,
		"matplotlib/figure.py": pngPy + `
class Figure:
    def __init__(self, w, h):
        self.w, self.h, self.lines = w, h, []
    def savefig(self, fname, format=None, **kwargs):
        assert format == "png", format
        fname.write(png(self.w, self.h))
`,
		"matplotlib/pyplot.py": `import warnings
from matplotlib._pylab_helpers import Gcf
from matplotlib.figure import Figure
class _Canvas:
    def __init__(self, figure):
        self.figure = figure
class _Manager:
    def __init__(self, num, figure):
        self.num, self.canvas = num, _Canvas(figure)
def figure(figsize=(4, 3)):
    num = len(Gcf.figs) + 1
    fig = Figure(*figsize)
    Gcf.figs[num] = _Manager(num, fig)
    return fig
def plot(*args):
    if not Gcf.figs:
        figure()
    list(Gcf.figs.values())[-1].canvas.figure.lines.append(args)
def show(*args, **kwargs):
    warnings.warn("FigureCanvasAgg is non-interactive, and thus cannot be shown")
`,
	}}.Write(t, dir)
	return dir
}

// TestMatplotlibStandIn: a figure shown with plt.show() and one still open
// when the call ends both come back as PNG images, each once, in order.
func TestMatplotlibStandIn(t *testing.T) {
	s := newServer(t, "--workers", "1", "--network", "none", "--wheelhouse", matplotlibStandIn(t))
	r := s.run(t, `
import matplotlib.pyplot as plt
plt.figure(figsize=(5, 2))
plt.plot([1, 2, 3])
plt.show()
print("shown")
plt.figure(figsize=(3, 4))
plt.plot([3, 2, 1])
`)
	wantStatus(t, r, "success")
	if len(r.rest) != 2 || len(r.sc.Displays) != 2 {
		t.Fatalf("%d blocks after the text, want 2 figures:\n%s", len(r.rest), r.text)
	}
	for i, size := range [][2]int{{5, 2}, {3, 4}} {
		img, ok := r.rest[i].(*sdk.ImageContent)
		if !ok || img.MIMEType != "image/png" {
			t.Errorf("figure %d: %T", i+1, r.rest[i])
			continue
		}
		wantPNG(t, "figure", img.Data, size[0], size[1])
	}
	if strings.Contains(r.sc.Stderr, "non-interactive") {
		t.Errorf("plt.show() was matplotlib's own: %s", r.sc.Stderr)
	}
	// The figures were closed: the next call on the worker starts with none.
	r = s.run(t, "import matplotlib._pylab_helpers as h\nlen(h.Gcf.get_all_fig_managers())")
	wantValue(t, r, "0")
	if len(r.rest) != 0 {
		t.Errorf("figures leaked into the next call: %d blocks", len(r.rest))
	}
}

// pygalWheelhouse zips Debian's python3-pygal (installed by .ci/run) into
// a wheel, with the one-line pkg_resources stub pygal 2.4 imports.
func pygalWheelhouse(t *testing.T) string {
	t.Helper()
	src := "/usr/lib/python3/dist-packages/pygal"
	files := map[string]string{
		"pkg_resources/__init__.py": "def iter_entry_points(group, name=None): return iter(())\n",
	}
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "__pycache__" || d.Name() == "test") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".py") && !strings.HasSuffix(p, ".css") && !strings.HasSuffix(p, ".js") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(src), p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("pygal from Debian's python3-pygal (apt-get install python3-pygal, as .ci/run does): %v", err)
	}
	dir := t.TempDir()
	packagestest.Wheel{Name: "pygal", Version: "2.4.0", Files: files, Imports: []string{"pygal", "pkg_resources"}}.Write(t, dir)
	return dir
}

// TestPygalChart: a real charting library's chart, by its own _repr_svg_
// (its _repr_png_ needs cairosvg, which fails and is passed over), comes
// back as an SVG resource.
func TestPygalChart(t *testing.T) {
	s := newServer(t, "--workers", "1", "--network", "none", "--wheelhouse", pygalWheelhouse(t))
	r := s.run(t, `
import pygal
chart = pygal.Bar(title="Fruit")
chart.add("apples", [3, 5, 2])
chart.add("pears", [1, 4, 6])
chart`)
	wantStatus(t, r, "success")
	if len(r.rest) != 1 || len(r.sc.Displays) != 1 {
		t.Fatalf("%d blocks after the text:\n%s", len(r.rest), r.text)
	}
	res, ok := r.rest[0].(*sdk.EmbeddedResource)
	if !ok || res.Resource.MIMEType != "image/svg+xml" || !strings.Contains(res.Resource.Text, "<svg") ||
		!strings.Contains(res.Resource.Text, "Fruit") || !strings.Contains(res.Resource.Text, "apples") {
		t.Fatalf("pygal chart: %#v", r.rest[0])
	}
	if !strings.HasPrefix(itemLines(r.sections["displays"])[0], "image/svg+xml ") {
		t.Errorf("<displays>: %q", r.sections["displays"])
	}
}

// readResource reads uri over s's session.
func readResource(t *testing.T, s *server, uri string) (*sdk.ReadResourceResult, error) {
	t.Helper()
	return s.session.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: uri})
}

// outputsCode writes a text file, a binary file and a PNG under /output/.
const outputsCode = pngPy + `
import os
os.makedirs("/output/sub", exist_ok=True)
open("/output/report.txt", "w").write("héllo\n")
open("/output/sub/data.bin", "wb").write(bytes(range(256)))
open("/output/plot.png", "wb").write(png(4, 3))
`

// checkOutputs checks a result of outputsCode and reads its files back
// byte for byte.
func checkOutputs(t *testing.T, s *server, r result) {
	t.Helper()
	wantStatus(t, r, "success")
	want := map[string][]byte{"report.txt": []byte("héllo\n"), "sub/data.bin": make([]byte, 256)}
	for i := range 256 {
		want["sub/data.bin"][i] = byte(i)
	}
	if len(r.sc.Files) != 3 {
		t.Fatalf("files %+v", r.sc.Files)
	}
	var links, images int
	for _, c := range r.rest {
		switch c := c.(type) {
		case *sdk.ResourceLink:
			links++
			if !strings.HasPrefix(c.URI, "pyrun://output/") || c.Size == nil {
				t.Errorf("link %+v", c)
			}
		case *sdk.ImageContent:
			images++
			wantPNG(t, "plot.png as an image block", c.Data, 4, 3)
		}
	}
	if links != 3 || images != 1 {
		t.Errorf("%d resource links and %d images, want 3 and 1", links, images)
	}
	for _, f := range r.sc.Files {
		res, err := readResource(t, s, f.URI)
		if err != nil {
			t.Errorf("read %s: %v", f.URI, err)
			continue
		}
		c := res.Contents[0]
		got := c.Blob
		if c.Text != "" {
			got = []byte(c.Text)
		}
		switch f.Path {
		case "plot.png":
			wantPNG(t, "plot.png read back", got, 4, 3)
		default:
			if !bytes.Equal(got, want[f.Path]) {
				t.Errorf("%s read back as %q, want %q", f.Path, got, want[f.Path])
			}
		}
		if f.Bytes != len(got) || c.MIMEType != f.MIMEType {
			t.Errorf("%s: %d bytes %s listed, %d bytes %s read", f.Path, f.Bytes, f.MIMEType, len(got), c.MIMEType)
		}
	}
	if lines := itemLines(r.sections["files"]); len(lines) != 3 || lines[0] != "/output/plot.png image/png "+strconv.Itoa(r.sc.Files[0].Bytes)+" bytes" {
		t.Errorf("<files>: %q", r.sections["files"])
	}
}

// TestOutputFilesOverStdio: /output/ files come back as resource links and
// read back byte for byte; the next call starts with an empty /output/.
func TestOutputFilesOverStdio(t *testing.T) {
	s := shared.get(t)
	checkOutputs(t, s, s.run(t, outputsCode))
	r := s.run(t, "import os; os.listdir('/output')")
	wantValue(t, r, "[]")
	// Names that are not URI-safe are escaped in the URI and read back.
	r = s.run(t, `open("/output/my report #1?.txt", "w").write("odd")`)
	if len(r.sc.Files) != 1 || !strings.HasSuffix(r.sc.Files[0].URI, "/my%20report%20%231%3F.txt") {
		t.Fatalf("files %+v", r.sc.Files)
	}
	if res, err := readResource(t, s, r.sc.Files[0].URI); err != nil || res.Contents[0].Text != "odd" {
		t.Errorf("read %s: %v", r.sc.Files[0].URI, err)
	}
	// A name with an ESC sequence and a bidirectional override reaches the
	// text block escaped, and reads back.
	r = s.run(t, `open("/output/red\x1b[31m\u202etxt.exe", "w").write("odd")`)
	if strings.ContainsAny(r.text, "\x1b\u202e") || !strings.Contains(r.text, `/output/"red\x1b[31m\u202etxt.exe" `) {
		t.Errorf("text block:\n%q", r.text)
	}
	if len(r.sc.Files) != 1 || r.sc.Files[0].Path != "red\x1b[31m\u202etxt.exe" {
		t.Fatalf("files %+v", r.sc.Files)
	}
	if res, err := readResource(t, s, r.sc.Files[0].URI); err != nil || string(res.Contents[0].Blob) != "odd" {
		t.Errorf("read %s: %v", r.sc.Files[0].URI, err)
	}
	if _, err := readResource(t, s, "pyrun://output/0123456789abcdef0123456789abcdef/x.txt"); err == nil ||
		!strings.Contains(err.Error(), "no such output") {
		t.Errorf("an unknown output: %v", err)
	}
}

// TestOutputExpiry: past --output-ttl a read says the output expired; past
// the store's file bound, that it was dropped.
func TestOutputExpiry(t *testing.T) {
	s := newServer(t, "--workers", "1", "--output-ttl", "1s", "--output-store-files", "2")
	r := s.run(t, `open("/output/a.txt", "w").write("a")`)
	uri := r.sc.Files[0].URI
	if _, err := readResource(t, s, uri); err != nil {
		t.Fatalf("read at once: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := readResource(t, s, uri)
		if err != nil {
			if !strings.Contains(err.Error(), "expired") {
				t.Errorf("read after the TTL: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the output did not expire within 30s with --output-ttl 1s")
		}
		time.Sleep(200 * time.Millisecond) // waiting out a TTL, not synchronising
	}
	r = s.run(t, `open("/output/b.txt", "w").write("b"); open("/output/c.txt", "w").write("c")`)
	first := r.sc.Files[0].URI
	r = s.run(t, `open("/output/d.txt", "w").write("d")`)
	if _, err := readResource(t, s, first); err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Errorf("the oldest output past the store's file bound: %v", err)
	}
	if _, err := readResource(t, s, r.sc.Files[0].URI); err != nil {
		t.Errorf("the newest output: %v", err)
	}
}

// TestFilesIn: text and bytes land in the working directory; escapes and
// over-size input are refused with a tool error naming the argument.
func TestFilesIn(t *testing.T) {
	s := newServer(t, "--workers", "1", "--max-code", "4KiB")
	r := s.mustCall(t, map[string]any{
		"python_code": "import os\n(open('data/in.csv').read(), list(open('b.bin', 'rb').read()), os.getcwd())",
		"files": map[string]any{
			"data/in.csv": "a,b\n1,2\n",
			"b.bin":       map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte{0, 255, 7})},
		},
	})
	wantValue(t, r, `["a,b\n1,2\n", [0, 255, 7], "/home/pyodide"]`)
	r = s.run(t, "import os; os.path.exists('data/in.csv')")
	wantValue(t, r, "false")
	for _, bad := range []struct {
		files any
		want  string
	}{
		{map[string]any{"../x": "1"}, "climbs out"},
		{map[string]any{"/etc/x": "1"}, "absolute"},
		{map[string]any{"a/./b": "1"}, "'.' part"},
		{map[string]any{"x": map[string]any{"base64": "***"}}, "base64"},
		{map[string]any{"x": 7}, "files"},
		{map[string]any{"big": strings.Repeat("x", 5000)}, "max_code"},
		{"not an object", "files"},
	} {
		res, err := s.callRaw(t.Context(), map[string]any{"python_code": "1", "files": bad.files})
		if err != nil {
			t.Fatal(err)
		}
		text := textOf(res)
		if !res.IsError || !strings.Contains(text, "files") || !strings.Contains(text, bad.want) {
			t.Errorf("files %v: isError %v, %q; want a tool error about %q", bad.files, res.IsError, text, bad.want)
		}
	}
}

// TestMountsEndToEnd: a read-only mount is readable and not writable, a
// :rw mount takes writes that reach the host.
func TestMountsEndToEnd(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.txt"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--workers", "1", "--mount", ro+":/data", "--mount", rw+":/shared:rw")
	const warning = "a host folder is mounted read-write: code run by any client can change, add and delete files in it"
	// The log is read as pyrun writes it: the line may be on its way.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_ = s.log.waitFor(ctx, "the :rw mount's warning", func(c map[string]int) bool { return c[warning] > 0 })
	if s.log.count(warning) != 1 {
		t.Errorf("no warning about the :rw mount at start:\n%s", s.log.tail())
	}
	r := s.run(t, `
out = [open("/data/in.txt").read()]
try:
    open("/data/x.txt", "w").write("no")
except PermissionError as e:
    out.append("refused")
open("/shared/result.txt", "w").write("from python")
out`)
	wantValue(t, r, `["host data", "refused"]`)
	if _, err := os.Stat(filepath.Join(ro, "x.txt")); err == nil {
		t.Error("the read-only mount was written")
	}
	if b, err := os.ReadFile(filepath.Join(rw, "result.txt")); err != nil || string(b) != "from python" {
		t.Errorf("the :rw mount: %q %v", b, err)
	}
}

// TestRunOut: pyrun run --out saves displays and /output/ files and says where.
func TestRunOut(t *testing.T) {
	needBinary(t)
	dir := t.TempDir()
	stdout, stderr, code := pyrunCmd(t, pngPy+`
class P:
    def _repr_png_(self): return png(2, 2)
display(P())
open("/output/notes.md", "w").write("# hi")
`, "run", "--workers", "1", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "display-1.png"))
	if err != nil {
		t.Fatal(err)
	}
	wantPNG(t, "display-1.png", b, 2, 2)
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.md")); string(b) != "# hi" {
		t.Errorf("notes.md: %q", b)
	}
	if !strings.Contains(stderr, "saved to "+filepath.Join(dir, "display-1.png")) || !strings.Contains(stderr, "saved to "+filepath.Join(dir, "notes.md")) {
		t.Errorf("pyrun run did not say where it saved:\n%s", stderr)
	}
	if !strings.Contains(stdout, "<displays>\nimage/png ") || !strings.Contains(stdout, "/output/notes.md text/markdown 4 bytes") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

// TestOutputFilesOverHTTP: over /mcp, a call's /output/ files read back
// byte for byte for the client that ran it, in any of its sessions; under
// access control another client's read is refused like a read of an
// unknown URI.
func TestOutputFilesOverHTTP(t *testing.T) {
	tokens, aliceToken, bobToken := twoClients(t)
	s := startServe(t, "--workers", "1", "--auth-token-file", tokens)
	alice, _ := s.mustDial(t, "mcp", aliceToken)
	bob, _ := s.mustDial(t, "mcp", bobToken)
	r := alice.run(t, outputsCode)
	checkOutputs(t, alice, r)
	for _, f := range r.sc.Files {
		if _, err := readResource(t, bob, f.URI); err == nil || !strings.Contains(err.Error(), "no such output for this client") {
			t.Errorf("bob read alice's %s: %v", f.Path, err)
		}
	}
	// Alice's other session (a new connection) is still alice.
	again, _ := s.mustDial(t, "sse", aliceToken)
	if res, err := readResource(t, again, r.sc.Files[0].URI); err != nil || len(res.Contents) != 1 {
		t.Errorf("alice over another session: %v", err)
	}
}

// TestSessionKeepsOutputAndFiles: a Python session keeps its /output/ and
// the input files it was given across calls (docs/contract.md sections 8 and 9);
// a call returns the /output/ files it wrote or changed, and a stateless
// call beside the session sees neither.
func TestSessionKeepsOutputAndFiles(t *testing.T) {
	s := newServer(t, "--workers", "1")
	r := s.inSession(t, "new", `open("/output/first.txt", "w").write("1")`,
		"files", map[string]any{"in/data.csv": "a,b\n1,2\n"})
	wantStatus(t, r, "success")
	id := r.sc.SessionID
	if len(r.sc.Files) != 1 || r.sc.Files[0].Path != "first.txt" {
		t.Fatalf("first call's files: %+v", r.sc.Files)
	}
	wantValue(t, s.run(t, "import os\n[os.listdir('/output'), os.path.exists('in/data.csv')]"), "[[], false]")

	r = s.inSession(t, id, `
import os
open("/output/second.txt", "w").write("2")
[sorted(os.listdir("/output")), open("/output/first.txt").read(), open("in/data.csv").read()]
`)
	wantValue(t, r, `[["first.txt", "second.txt"], "1", "a,b\n1,2\n"]`)
	if len(r.sc.Files) != 1 || r.sc.Files[0].Path != "second.txt" {
		t.Errorf("second call's files, want only the one it wrote: %+v", r.sc.Files)
	}
	for _, f := range r.sc.Files {
		res, err := readResource(t, s, f.URI)
		if err != nil || res.Contents[0].Text != "2" {
			t.Errorf("read %s: %v", f.URI, err)
		}
	}
	wantStatus(t, s.inSession(t, id, "", "end_session", true), "success")
}

package apps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/pyrunserve"
	"github.com/pyrun/pyrun/internal/testtier"
	"github.com/pyrun/pyrun/mcp/apps"
)

// browserCode is the run the browser test shows: a PNG (made by hand, as
// no imaging library loads offline), a DataFrame-like HTML table, an HTML
// display with a script, a file under /output/, and a counter that says
// which run of its session it is.
const browserCode = `import struct, zlib
count = globals().get("count", 0) + 1
print("run", count)

def png(w, h):
    raw = b"".join(b"\x00" + bytes([200, 30, 30]) * w for _ in range(h))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    head = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")

class Picture:
    def _repr_png_(self):
        return png(12, 8)

class Frame:
    def _repr_html_(self):
        return ('<div><style scoped>.dataframe td { color: red }</style><table border="1" class="dataframe">'
                '<thead><tr style="text-align: right;"><th></th><th>n</th><th>name</th></tr></thead><tbody>'
                '<tr><th>0</th><td>3</td><td>c</td></tr><tr><th>1</th><td>10</td><td>a</td></tr>'
                '<tr><th>2</th><td>2</td><td>b</td></tr></tbody></table><p>3 rows x 2 columns</p></div>')

class Chart:
    def _repr_html_(self):
        return '<div id="c">not drawn</div><script>document.getElementById("c").textContent = "drawn"</script>'

display(Picture())
display(Frame())
display(Chart())
with open("/output/data.csv", "w") as f:
    f.write("n,name\n3,c\n10,a\n2,b\n")
`

// browserSetup is the session's first call, which the view lists before
// the call it shows.
const browserSetup = "prep = 'ready'"

// browserReport is what web/browser.mjs saw.
type browserReport struct {
	Console []string `json:"console"`
	Host    struct {
		Step        string   `json:"step"`
		ResourceURI string   `json:"resourceUri"`
		MIMEType    string   `json:"mimeType"`
		SessionID   string   `json:"sessionId"`
		Errors      []string `json:"errors"`
	} `json:"host"`
	Past []struct {
		Label, Status, Code string
	} `json:"past"`
	First struct {
		Label       string `json:"label"`
		Status      string `json:"status"`
		StatusColor string `json:"statusColor"`
		Code        string `json:"code"`
		Stdout      string `json:"stdout"`
		Session     string `json:"session"`
		Images      []struct {
			Src           string `json:"src"`
			Width, Height int
		} `json:"images"`
		TableHead   []string `json:"tableHead"`
		TableColumn []string `json:"tableColumn"`
		Frames      int      `json:"frames"`
		Files       []struct{ Name, URI string }
	} `json:"first"`
	Chart            string   `json:"chart"`
	Shown            string   `json:"shown"`
	DownloadsWithout int      `json:"downloadsWithout"`
	Sorted           []string `json:"sorted"`
	Downloads        []struct {
		URI, Name string
		Text      *string
	} `json:"downloads"`
	Second *struct {
		Status  string `json:"status"`
		Stdout  string `json:"stdout"`
		Session string `json:"session"`
		Images  int    `json:"images"`
	} `json:"second"`
	Third *struct {
		Label, Status, Code string
	} `json:"third"`
}

// TestBrowser shows a run in Debian's chromium, headless, as a host does:
// a test page with the official host side of ext-apps (AppBridge) connects
// to pyrun serve declaring the extension, finds the view in the run tool's
// _meta, reads it, runs two calls in a new session and hands the view the
// second call's input and result. The view lists the session's first call
// before it; it draws the PNG, the table (sortable:
// a click on a header sorts it, by number), the HTML display in a
// sandboxed frame and the file, whose link has the host read it from
// pyrun; its "Run again" reaches pyrun as a tools/call in the same
// session, whose result becomes the next cell, and so does the earlier
// cell's. Under a host that cannot download, the file's link shows the
// file in the view, read through the host. The page is also checked
// to be what scripts/vendor-apps builds from web/.
func TestBrowser(t *testing.T) {
	testtier.Needs(t, "chromium, node and the npm packages of mcp/apps/web, the pyrun binary")
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no chromium (apt-get install chromium, or CHROMIUM=path): %v", err)
	}
	web := webDir(t)
	tmp := t.TempDir()
	node(t, web, "build.mjs", "page", filepath.Join(tmp, "result.html"))
	if built, err := os.ReadFile(filepath.Join(tmp, "result.html")); err != nil || string(built) != apps.HTML() {
		t.Errorf("result.html is not what web/ builds (run scripts/vendor-apps): %v", err)
	}
	node(t, web, "build.mjs", "host", filepath.Join(tmp, "host.js"))

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	var buildLog bytes.Buffer
	bin, err := pyrunserve.Build(ctx, tmp, &buildLog)
	if err != nil {
		t.Fatalf("%v\n%s", err, buildLog.String())
	}
	srv, err := pyrunserve.Start(ctx, bin, 1, "--workers", "1", "--network", "none", "--session-spares", "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	// The host page and /mcp on one origin, as a host's own server would
	// serve them; the calls that reach pyrun are noted.
	target, _ := url.Parse(srv.Base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var calls []json.RawMessage
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
				mu.Lock()
				calls = append(calls, msg.Params)
				mu.Unlock()
			}
		}
		proxy.ServeHTTP(w, r)
	})
	mux.HandleFunc("/host.html", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, filepath.Join(web, "host.html")) })
	mux.HandleFunc("/host.js", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, filepath.Join(tmp, "host.js")) })
	host := httptest.NewServer(mux)
	t.Cleanup(host.Close)

	shot := filepath.Join(tmp, "screenshot.png")
	var rep browserReport
	out := node(t, web, "browser.mjs", host.URL+"/host.html", browserSetup, browserCode, shot)
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("browser.mjs printed %q: %v", out, err)
	}
	if rep.Host.Step != "sent" {
		t.Fatalf("the host page stopped at %q: %v; console: %v; pyrun: %s", rep.Host.Step, rep.Host.Errors, rep.Console, srv.Log)
	}
	if rep.Host.ResourceURI != apps.ResultURI || rep.Host.MIMEType != apps.MIMEType {
		t.Errorf("the host found the view %q (%q), want %s (%s)", rep.Host.ResourceURI, rep.Host.MIMEType, apps.ResultURI, apps.MIMEType)
	}
	if len(rep.Past) != 1 || rep.Past[0].Label != "[1]" || rep.Past[0].Code != browserSetup || rep.Past[0].Status != "success" {
		t.Errorf("earlier cells: %+v, want the session's first call, [1] %q", rep.Past, browserSetup)
	}
	f := rep.First
	if f.Label != "[2]" {
		t.Errorf("the call's cell is %s, want [2], the session's second", f.Label)
	}
	if f.StatusColor != "rgb(0, 0, 255)" {
		t.Errorf("the status is in %s, want the host's --color-text-success, rgb(0, 0, 255)", f.StatusColor)
	}
	if f.Status != "success" || f.Code != browserCode || f.Stdout != "run 1\n" || f.Session == "" || f.Session != rep.Host.SessionID {
		t.Errorf("first cell: status %q, stdout %q, session %q (the call's %q), code shown %v", f.Status, f.Stdout, f.Session, rep.Host.SessionID, f.Code == browserCode)
	}
	if len(f.Images) != 1 || f.Images[0].Src != "data:image/png;base64," || f.Images[0].Width != 12 || f.Images[0].Height != 8 {
		t.Errorf("images: %+v, want the 12x8 PNG, decoded", f.Images)
	}
	if strings.Join(f.TableHead, ",") != ",n,name" || strings.Join(f.TableColumn, ",") != "3,10,2" {
		t.Errorf("table: head %q, column n %q; want ,n,name and 3,10,2", f.TableHead, f.TableColumn)
	}
	if strings.Join(rep.Sorted, ",") != "2,3,10" {
		t.Errorf("column n after a click on its header: %q, want 2,3,10 (sorted as numbers)", rep.Sorted)
	}
	if f.Frames != 1 || rep.Chart != "drawn" {
		t.Errorf("%d sandboxed frames, its text %q; want 1 (the HTML display), drawn by its script", f.Frames, rep.Chart)
	}
	if len(f.Files) != 1 || f.Files[0].Name != "data.csv" || !strings.HasPrefix(f.Files[0].URI, "pyrun://output/") {
		t.Errorf("files: %+v, want data.csv", f.Files)
	}
	if len(rep.Downloads) != 1 || rep.Downloads[0].Text == nil || *rep.Downloads[0].Text != "n,name\n3,c\n10,a\n2,b\n" {
		t.Errorf("downloads: %+v, want data.csv's text read from pyrun", rep.Downloads)
	}
	if s := rep.Second; s == nil || s.Status != "success" || s.Stdout != "run 2\n" || s.Session != f.Session || s.Images != 1 {
		t.Errorf("second cell (Run again): %+v, want run 2 in session %s, with its PNG", s, f.Session)
	}
	if c := rep.Third; c == nil || c.Status != "success" || c.Code != browserSetup || c.Label != "[4]" {
		t.Errorf("the earlier cell run again: %+v, want %q run as the session's fourth call", c, browserSetup)
	}
	mu.Lock()
	defer mu.Unlock()
	if rep.Shown != "n,name\n3,c\n10,a\n2,b\n" || rep.DownloadsWithout != 0 {
		t.Errorf("with a host that cannot download, the view showed %q (%d downloads); want data.csv's text, read through the host", rep.Shown, rep.DownloadsWithout)
	}
	if len(calls) != 6 {
		t.Fatalf("%d tools/call reached pyrun, want 6 (the host's two, the view's two, the second page's two)", len(calls))
	}
	var again struct {
		Name      string
		Arguments map[string]any
	}
	for i, code := range map[int]string{2: browserCode, 3: browserSetup} {
		if err := json.Unmarshal(calls[i], &again); err != nil || again.Name != "run_python_code" ||
			again.Arguments["python_code"] != code || again.Arguments["session_id"] != f.Session {
			t.Errorf("the view's tools/call: %s, want run_python_code with %q in session %s", calls[i], code, f.Session)
		}
	}
	if n, err := pixels(shot, color.RGBA{200, 30, 30, 255}); err != nil || n < 2*12*8 {
		t.Errorf("the screenshot shows %d pixels of the PNG's colour, want both cells' 12x8 (%v)", n, err)
	} else if dir := os.Getenv("PYRUN_APPS_SCREENSHOT"); dir != "" {
		// To look at: the view as the host showed it.
		if b, err := os.ReadFile(shot); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "apps-browser.png"), b, 0o644)
		}
	}
	for _, line := range rep.Console {
		if strings.Contains(line, "Content Security Policy") {
			t.Errorf("the view broke the host's CSP: %s", line)
		}
	}
}

// pixels counts the pixels of the PNG file at path that are c.
func pixels(path string, c color.RGBA) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return 0, fmt.Errorf("decode the screenshot: %w", err)
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n, nil
}

// webDir is web/, its pinned packages installed (npm ci) on first use.
func webDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("web")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); errors.Is(err, os.ErrNotExist) {
		cmd := exec.CommandContext(t.Context(), "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// node runs a script of web/ with args, for at most three minutes, and
// returns what it printed.
func node(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

package pyodidehost_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// What hostile R code tries stays inside the worker: the host's files,
// environment, processes, the loopback network, the runtime folder, and
// the calls that would end or crash the worker.
func TestRHostileCode(t *testing.T) {
	rt := provision(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	w := startR(t, rConfig)
	// R's own file functions see webR's in-memory file system only.
	js := func(code string) string {
		return fmt.Sprintf(".Call(webr:::ffi_eval_js, %q, FALSE)", code)
	}
	target := filepath.Join(rt.Dir, "package.json")
	for _, tc := range []struct{ name, code, want string }{
		{"read /etc/passwd", "readLines('/etc/passwd')", "cannot open"},
		{"host file by R", fmt.Sprintf("readLines(%q)", target), "cannot open"},
		{"system", "system('id')", "system() is not available"},
		{"system2", "system2('id')", "system2() is not available"},
		{"q", "q('no')", "q() is not available"},
		{"quit", "quit(save = 'no', status = 3)", "quit() is not available"},
		{"canvas", "webr::canvas(); plot(1)", "webr::canvas() is not available"},
		{"eval_js", "webr::eval_js('1')", "webr::eval_js() is not available"},
		{"install", "webr::install('MASS')", "not available"},
		{"loopback by R", fmt.Sprintf("readLines(url('http://127.0.0.1:%d/'))", port), "cannot open"},
		// JavaScript in R's thread through webR's ffi meets Deno's permissions.
		{"host file by JS", js("Deno.readTextFileSync('/etc/passwd')"), "Requires read access"},
		{"node fs by JS", js("require('fs').readFileSync('/etc/passwd', 'utf8')"), "Requires read access"},
		{"env by JS", js("Deno.env.get('PYRUN_TEST_SECRET')"), "Requires env access"},
		{"write runtime by JS", js(fmt.Sprintf("Deno.writeTextFileSync(%q, 'x')", filepath.Join(rt.Dir, "webr", "main.ts"))), "Requires write access"},
		{"process by JS", js(fmt.Sprintf("new Deno.Command(%q).outputSync()", rt.Deno)), "Requires run access"},
		{"node process by JS", js(fmt.Sprintf("require('child_process').execFileSync(%q)", rt.Deno)), "Requires"},
	} {
		r := result(t, w.run(tc.code, nil))
		if r.Status != "run-error" || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: %s %q, want run-error with %q", tc.name, r.Status, r.Error, tc.want)
		}
	}
	// console.* in R's thread would write to stdout, the protocol: it goes
	// to stderr (answer fails the test on a line that is not an event).
	wantSuccess(t, w.run(js("console.log('not an event'); console.info('nor this'); 1"), nil), "console.log in R's thread")
	// webR's ffi can also run JavaScript on the worker's main thread and
	// await it: the same permissions hold there.
	for _, code := range []string{
		fmt.Sprintf("Deno.connect({hostname: '127.0.0.1', port: %d}).then(() => 'connected', (e) => String(e))", port),
		fmt.Sprintf("fetch('http://127.0.0.1:%d/').then(() => 'connected', (e) => String(e))", port),
		"Deno.readTextFile('/etc/passwd').then(() => 'read', (e) => String(e))",
	} {
		r := wantSuccess(t, w.run(fmt.Sprintf(".Call(webr:::ffi_eval_js, %q, TRUE)", code), nil), code)
		if r.Value == nil || !strings.Contains(*r.Value, "Requires") {
			t.Errorf("%s on the main thread: %v, want a permission error", code, r.Value)
		}
	}
	// The worker is still the same and serves calls.
	if r := wantSuccess(t, w.run("Sys.getenv('PYRUN_TEST_SECRET')", nil), "env by R"); r.Value == nil || *r.Value != `""` {
		t.Errorf("the host's environment reached R: %v", r.Value)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("R's code reached a loopback listener %d times", n)
	}
	b, err := os.ReadFile(filepath.Join(rt.Dir, "webr", "main.ts"))
	if err != nil || !bytes.Contains(b, []byte("pyrun's R worker")) {
		t.Errorf("the runtime's R worker changed: %v", err)
	}
}

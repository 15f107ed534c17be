package main

// Where `pyrun serve` makes its socket and `pyrun stdio` looks for it
// (local.go): `--socket default` is the same path for both, and a path that
// looks like the result of an empty variable is warned about.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// bufLog is a logger into a buffer, at debug level.
func bufLog() (hclog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return hclog.New(&hclog.LoggerOptions{Output: &b, Level: hclog.Debug}), &b
}

// serveSocketAt runs serve's listener set-up for args (no HTTP) and returns
// the socket it made and what it logged.
func serveSocketAt(t *testing.T, args ...string) (string, string) {
	t.Helper()
	o, _, err := loadOptions("serve", append([]string{"--listen", "none"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	log, buf := bufLog()
	ln, sock, err := socketListeners(o, log)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	ln.Close()
	sock.Close()
	return sock.Addr().String(), buf.String()
}

func TestSocketDefaultIsWhereStdioLooks(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	got, logged := serveSocketAt(t, "--socket", "default")
	stdio, _, err := loadOptions("stdio", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "pyrun.sock"); got != want || stdio.stdioSocket() != want {
		t.Errorf("serve --socket default made %s, stdio looks at %s; want both %s", got, stdio.stdioSocket(), want)
	}
	if strings.Contains(logged, "looks wrong") {
		t.Errorf("a warning for the default path:\n%s", logged)
	}
	stdioDefault, _, _ := loadOptions("stdio", []string{"--socket", "default"})
	if stdioDefault.stdioSocket() != got {
		t.Errorf("stdio --socket default looks at %s, want %s", stdioDefault.stdioSocket(), got)
	}

	// Without XDG_RUNTIME_DIR, both use /run/user/UID if it exists, and
	// serve refuses `default` if it does not.
	t.Setenv("XDG_RUNTIME_DIR", "")
	o, _, err := loadOptions("serve", []string{"--socket", "default"})
	if err != nil {
		t.Fatal(err)
	}
	runUser := filepath.Join("/run/user", strconv.Itoa(os.Getuid()))
	path, err := o.serveSocket()
	if _, serr := os.Stat(runUser); serr == nil {
		if path != filepath.Join(runUser, "pyrun.sock") || err != nil {
			t.Errorf("serve --socket default without XDG_RUNTIME_DIR: %q, %v", path, err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "XDG_RUNTIME_DIR is unset and "+runUser+" does not exist") {
		t.Errorf("serve --socket default with no runtime folder: %q, %v; want an error naming both", path, err)
	}
}

// A socket path such as an empty variable makes is warned about, saying
// where stdio looks; a plain path is not.
func TestSocketPathLooksWrong(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	want := "pyrun stdio looks at " + filepath.Join(dir, "run", "pyrun.sock") + " by default (--socket default serves there)"

	// As a config file or a quoted shell word leaves it.
	_, logged := serveSocketAt(t, "--socket", filepath.Join(dir, "$XDG_RUNTIME_DIR", "pyrun.sock"))
	if !strings.Contains(logged, "the socket's path looks wrong: it holds a $") || !strings.Contains(logged, want) {
		t.Errorf("a path with a $: logged\n%s", logged)
	}
	// Control: a plain path.
	if _, logged := serveSocketAt(t, "--socket", filepath.Join(dir, "plain", "pyrun.sock")); strings.Contains(logged, "looks wrong") {
		t.Errorf("a plain path was warned about:\n%s", logged)
	}
	// /pyrun.sock, as `--socket $XDG_RUNTIME_DIR/pyrun.sock` without the
	// variable makes it (not made here: the test may run as root).
	if d := socketDoubt("/pyrun.sock"); !strings.Contains(d, "it is in /, as when the variable before /pyrun.sock was empty") || !strings.Contains(d, want) {
		t.Errorf("/pyrun.sock: %q", d)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if _, err := os.Stat(filepath.Join("/run/user", strconv.Itoa(os.Getuid()))); err != nil {
		if d := socketDoubt("/pyrun.sock"); !strings.Contains(d, "pyrun stdio has no socket to look at by default here") {
			t.Errorf("/pyrun.sock with no runtime folder: %q", d)
		}
	}
	// stdio warns too, before it looks (nothing is made there).
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	o, _, err := loadOptions("stdio", []string{"--socket", "/pyrun-no-such-folder/pyrun.sock"})
	if err != nil {
		t.Fatal(err)
	}
	log, buf := bufLog()
	if c, err := attachConn(o, log); c != nil || err != nil {
		t.Fatalf("attach to a socket that is not there: %v, %v", c, err)
	}
	if !strings.Contains(buf.String(), "its top folder /pyrun-no-such-folder does not exist") {
		t.Errorf("stdio did not warn about its socket's path:\n%s", buf.String())
	}
}

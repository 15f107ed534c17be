package main

// End-to-end tests of the local service (docs/contract.md section 16): `pyrun serve
// --socket`, `pyrun stdio --attach` bridging to it, and socket activation,
// with real processes, real sockets and real workers.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testproc"
)

// attached starts `pyrun stdio --attach required` on sock with an MCP
// client, and checks that it bridged rather than serving by itself.
func attached(t *testing.T, sock string) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	s, err := startServer(ctx, "--attach", "required", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.log.waitFor(ctx, "the bridge", func(c map[string]int) bool { return c["attached to the pyrun service"] == 1 }); err != nil {
		t.Errorf("pyrun stdio did not bridge to the service: %v\n%s", err, s.log.tail())
	}
	if s.log.count("serving MCP on stdio") != 0 {
		t.Errorf("pyrun stdio served by itself:\n%s", s.log.tail())
	}
	return s
}

// A Python session started through one `pyrun stdio` continues through
// another after the first has exited: both bridge to one service, and the
// session is the service's. Neither starts a worker.
func TestSessionContinuesAcrossStdioProcesses(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "pyrun.sock")
	svc := startServe(t, "--socket", sock, "--workers", "1")
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v; want 0600", sock, err, st.Mode())
	}

	first := attached(t, sock)
	id := first.inSession(t, "new", "x = 41").sc.SessionID
	if err := first.session.Close(); err != nil {
		t.Fatalf("the first pyrun stdio did not exit cleanly when its client hung up: %v\n%s", err, first.log.tail())
	}

	second := attached(t, sock)
	second.closeWithTest(t)
	wantValue(t, second.inSession(t, id, "x + 1"), "42")
	// Stateless calls too, from the service's pool.
	wantValue(t, second.run(t, "1 + 1"), "2")

	m := svc.metrics(t)
	if m["pyrun_socket_connections_total"] != 2 || m["pyrun_socket_connections_open"] != 1 {
		t.Errorf("socket metrics: %v total, %v open; want 2 and 1", m["pyrun_socket_connections_total"], m["pyrun_socket_connections_open"])
	}
}

// --attach required fails at once, saying why, when no service answers;
// it does not fall back to a pool of its own.
func TestAttachRequiredWithoutService(t *testing.T) {
	needBinary(t)
	sock := filepath.Join(t.TempDir(), "pyrun.sock")
	began := time.Now()
	_, stderr, code := pyrunCmd(t, "", "stdio", "--attach", "required", "--socket", sock)
	if code != exitFail {
		t.Errorf("exit status %d, want %d", code, exitFail)
	}
	for _, want := range []string{"--attach required", "no pyrun service answers at " + sock, "systemctl --user start pyrun.socket"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the error does not say %q:\n%s", want, stderr)
		}
	}
	// Nothing was started: no runtime, no pool.
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %v to fail", d)
	}
}

// --attach auto without a service serves with a pool of its own, as
// before.
func TestAttachAutoFallsBack(t *testing.T) {
	s := newServer(t, "--workers", "1", "--socket", filepath.Join(t.TempDir(), "none.sock"))
	wantValue(t, s.run(t, "6 * 7"), "42")
	if s.log.count("serving MCP on stdio") != 1 {
		t.Errorf("pyrun stdio did not serve by itself:\n%s", s.log.tail())
	}
}

// When the service stops while a bridge is attached, the bridge ends with
// an error saying so, and its client sees its server go (stdout closes), as
// when a stdio server exits.
func TestServiceStopEndsBridge(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pyrun.sock")
	svc := startServe(t, "--socket", sock, "--workers", "1", "--listen", "none")

	cmd := exec.Command(pyrunBin, "stdio", "--attach", "required", "--socket", sock, "--log-format", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, stdout := testproc.StartPiped(t, cmd)
	defer stdin.Close()
	out := bufio.NewReader(stdout)
	if _, err := stdin.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := out.ReadString('\n')
	if err != nil || !strings.Contains(line, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize through the bridge: %q, %v", line, err)
	}

	svc.signal(syscall.SIGTERM)
	if code := svc.wait(90 * time.Second); code != 0 {
		t.Errorf("pyrun serve exited with %d", code)
	}
	if rest, err := out.ReadString('\n'); err != io.EOF {
		t.Errorf("the client's stdout did not close: %q, %v", rest, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFail {
		t.Errorf("pyrun stdio exited with %v, want status %d", err, exitFail)
	}
	if !strings.Contains(stderr.String(), "closed the connection (it stopped or restarted)") {
		t.Errorf("pyrun stdio does not say the service went:\n%s", stderr.String())
	}
}

// Socket activation: systemd-socket-activate (systemd's own tool, as the
// user unit's socket does) listens on the socket and starts pyrun serve
// with it at the first connection; pyrun serves on the inherited socket
// and leaves the socket file, which is systemd's, in place when it stops.
func TestSocketActivation(t *testing.T) {
	needBinary(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatal("systemd-socket-activate is not installed: apt-get install systemd (the CI script does)")
	}
	sock := filepath.Join(t.TempDir(), "pyrun.sock")
	// The arguments of configs/user/pyrun.service, with the test's socket.
	args := userServiceArgs(t, sock)
	log := newJSONLog() // systemd-socket-activate's lines too, as plain text
	cmd := exec.Command(activate, append([]string{"-l", sock, "-E", "HOME", "-E", "PATH", pyrunBin}, append(args, "--workers", "1", "--log-format", "json")...)...)
	cmd.Stderr = log
	cmd.WaitDelay = 10 * time.Second // killed, its workers may hold stderr a moment
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pyrun serve's stderr:\n%s", log.tail(60))
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if _, err := log.wait(ctx, 0, func(r logRecord) bool { return strings.HasPrefix(r.msg(), "Listening on "+sock) }); err != nil {
		t.Fatalf("systemd-socket-activate: %v", err)
	}

	// The first connection starts pyrun; the client waits in the backlog.
	c := attached(t, sock)
	wantValue(t, c.run(t, "1 + 1"), "2")
	if _, err := log.wait(ctx, 0, func(r logRecord) bool { return r.msg() == "socket activation" }); err != nil {
		t.Errorf("pyrun did not serve the inherited socket: %v", err)
	}
	if err := c.session.Close(); err != nil {
		t.Errorf("pyrun stdio: %v", err)
	}

	// systemd-socket-activate execs pyrun: the process is pyrun now.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("pyrun serve exited with %v after SIGTERM", waitErr)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("pyrun serve did not stop")
	}
	if st, err := os.Lstat(sock); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Errorf("the activated socket file is gone after pyrun stopped (%v): systemd could not start it again", err)
	}
}

// userServiceArgs are the arguments of configs/user/pyrun.service's
// ExecStart after the program, with %t/pyrun.sock replaced by sock.
func userServiceArgs(t *testing.T, sock string) []string {
	t.Helper()
	unit, err := os.ReadFile("../../configs/user/pyrun.service")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) < 2 || args[0] != "%h/.local/bin/pyrun" {
		t.Fatalf("configs/user/pyrun.service: ExecStart %q, want %%h/.local/bin/pyrun ...", args)
	}
	args = args[1:]
	for i, a := range args {
		if a == "%t/pyrun.sock" {
			args[i] = sock
		}
	}
	return args
}

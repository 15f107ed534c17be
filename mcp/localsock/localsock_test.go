//go:build linux

// The socket tests need Linux: peers are checked with SO_PEERCRED, and
// the other-user cases start a helper as nobody with ambient capabilities.

package localsock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/internal/testproc"
	"github.com/pyrun/pyrun/mcp/mcptest"
)

// The helper modes of this test binary, run as another user by asOtherUser.
func TestMain(m *testing.M) {
	switch mode, path, _ := strings.Cut(os.Getenv("LOCALSOCK_HELPER"), ":"); mode {
	case "dial":
		// Connect and say what the server did: a refused peer's connection
		// is closed at once, with nothing written.
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Println("dial error:", err)
			os.Exit(0)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		fmt.Println("read:", n, err)
		os.Exit(0)
	case "listen":
		ln, err := net.Listen("unix", path)
		if err != nil {
			fmt.Println("listen error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const nobody = 65534

// asOtherUser runs this test binary in a helper mode as uid/gid 65534.
// It keeps CAP_DAC_OVERRIDE, so that file modes do not stop it: what is
// tested is the peer check, which is what stops a process that can reach
// the socket anyway (root's, another user's in a shared folder).
func asOtherUser(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("this test makes a process of another user, which needs root (CI runs as root)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's folder is root's alone: the other user runs a copy.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "helper")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LOCALSOCK_HELPER="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody},
		AmbientCaps: []uintptr{1}, // CAP_DAC_OVERRIDE
	}
	return cmd
}

func TestListenIsOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "pyrun.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", st.Mode())
	}
	dst, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("the folder Listen made has mode %v, want 0700", dst.Mode().Perm())
	}
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file is still there after Close: %v", err)
	}
}

func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	// A socket file whose server is gone.
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	ln, err := Listen(stale)
	if err != nil {
		t.Fatalf("a stale socket file was not replaced: %v", err)
	}
	defer ln.Close()

	// A live one is another server's.
	if _, err := Listen(stale); !errors.Is(err, ErrInUse) {
		t.Errorf("Listen on a live socket: %v, want ErrInUse", err)
	}
	// Anything else is not pyrun's to remove.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file: %v, want an error saying it is not a socket", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("Listen changed a regular file")
	}
}

// guardAndAccept listens on path behind Guard and accepts in the
// background until the test ends: accepted has each connection the guard
// let through, and is closed once the guard is.
func guardAndAccept(t *testing.T, path string, lim Limits, log hclog.Logger) (*Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	g := Guard(ln, lim, log)
	t.Cleanup(func() { g.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	return g, accepted
}

// dial connects to path as Dial does, failing the test if it cannot; the
// connection is closed when the test ends.
func dial(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := Dial(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A process of another user that reaches the socket is refused: its
// connection is closed with nothing read or written, logged and counted;
// this user's connections are accepted.
func TestGuardRefusesOtherUsers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pyrun.sock")
	logs := &syncbuf.Buffer{}
	g, accepted := guardAndAccept(t, path, Limits{MaxConns: 4}, hclog.New(&hclog.LoggerOptions{Output: logs}))

	out, err := asOtherUser(t, "dial:"+path).CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "read: 0 EOF" {
		t.Errorf("the other user's connection: %q, want it closed at once (read: 0 EOF)", got)
	}
	if s := g.Stats(); s.RefusedPeer != 1 || s.Accepted != 0 {
		t.Errorf("stats %+v, want one refused for its peer and none accepted", s)
	}
	if !strings.Contains(logs.String(), "refused a connection on the socket from another user") || !strings.Contains(logs.String(), "uid=65534") {
		t.Errorf("the refusal is not logged with the uid:\n%s", logs.String())
	}

	dial(t, path)
	sc := mcptest.Receive(t, accepted, 10*time.Second, "this user's connection was not accepted")
	p, ok := PeerOfConn(sc)
	if !ok || int(p.UID) != os.Getuid() || int(p.PID) != os.Getpid() {
		t.Errorf("accepted peer %+v (%v), want this process", p, ok)
	}
	sc.Close()
}

// Past MaxConns, connections are refused until one closes.
func TestGuardMaxConns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pyrun.sock")
	g, accepted := guardAndAccept(t, path, Limits{MaxConns: 1}, hclog.NewNullLogger())
	dial(t, path)
	first := <-accepted
	c2 := dial(t, path)
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("the second connection: read %d, %v; want it closed (EOF)", n, err)
	}
	if s := g.Stats(); s.RefusedLimits != 1 || s.Open != 1 {
		t.Errorf("stats %+v, want one refused by the limit, one open", s)
	}
	first.Close()
	dial(t, path)
	mcptest.Receive(t, accepted, 10*time.Second, "a connection after the first closed was not accepted").Close()
}

// A client does not trust a socket served by another user (one made in a
// shared folder, say): Dial refuses it.
func TestDialRefusesOtherUsersServer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pyrun.sock")
	cmd := asOtherUser(t, "listen:"+path)
	stdin, stdout := testproc.StartPiped(t, cmd)
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, err = Dial(path, time.Second)
	if err == nil || !strings.Contains(err.Error(), "runs as uid 65534") {
		t.Errorf("Dial to another user's server: %v, want a refusal naming its uid", err)
	}
}

// Listen refuses a folder another user may write to, or one under such a
// folder, or one another user owns, as ssh refuses a key file there; a
// folder with the sticky bit (as /tmp) and the user's own are taken.
func TestListenRefusesFoldersOthersMayWrite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   os.FileMode // of the socket's folder's parent, then of the folder
		inner  os.FileMode
		refuse string
	}{
		{"world-writable folder", 0o755, 0o777, "its group or other users may write to it (mode drwxrwxrwx, no sticky bit)"},
		{"group-writable folder", 0o755, 0o770, "its group or other users may write to it (mode drwxrwx---, no sticky bit)"},
		{"world-writable parent", 0o777, 0o700, "its group or other users may write to it (mode drwxrwxrwx, no sticky bit)"},
		{"sticky world-writable folder", 0o755, 0o777 | os.ModeSticky, ""},
		{"own folder", 0o755, 0o700, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "p")
			dir := filepath.Join(parent, "run")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			// Chmod, not the umask, sets these bits (the sticky bit too).
			if err := os.Chmod(dir, tc.inner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(parent, tc.mode); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "pyrun.sock")
			ln, err := Listen(path)
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ln.Close()
				return
			}
			if err == nil {
				ln.Close()
				t.Fatalf("Listen took %s", path)
			}
			if !errors.Is(err, ErrUnsafeFolder) || !strings.Contains(err.Error(), tc.refuse) {
				t.Errorf("error %q; want ErrUnsafeFolder saying %q", err, tc.refuse)
			}
			if _, serr := os.Lstat(path); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a socket file was made in the refused folder: %v", serr)
			}
		})
	}
	t.Run("another user's folder", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Fatal("giving a folder to another user needs root (CI runs as root)")
		}
		dir := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, err := Listen(filepath.Join(dir, "pyrun.sock"))
		if !errors.Is(err, ErrUnsafeFolder) || !strings.Contains(err.Error(), "it belongs to uid 65534, neither this user (uid 0) nor root") {
			t.Errorf("error %v; want ErrUnsafeFolder naming the owner", err)
		}
	})
	// The rule on owners, for every user (the case above needs root).
	if d := folderDoubt(os.ModeDir|0o755, 1000, 1000); d != "" {
		t.Errorf("the user's own folder: %q", d)
	}
	if d := folderDoubt(os.ModeDir|0o755, 0, 1000); d != "" {
		t.Errorf("root's folder: %q", d)
	}
	if d := folderDoubt(os.ModeDir|0o755, 1001, 1000); !strings.Contains(d, "belongs to uid 1001") {
		t.Errorf("another user's folder: %q", d)
	}
}

// Package localsock is the Unix socket of a local pyrun service: made so that
// only its owner can connect (docs/contract.md section 16), or inherited from systemd
// (socket activation), with every connection's peer checked with
// SO_PEERCRED; and the client's side, which checks the server's peer the
// same way before it trusts it with the client's code.
//
//	ln, err := localsock.Listen(path)
//	g := localsock.Guard(ln, localsock.Limits{MaxConns: 64}, log)
//	conn, err := g.Accept() // a peer of the same user, or root
//
//	conn, err := localsock.Dial(path, time.Second) // a server of the same user, or root
package localsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Peer is the process at the other end of a connection, as the kernel saw
// it when the connection was made.
type Peer struct {
	UID, GID uint32
	PID      int32
}

// Trusted says whether p may use (or serve) a socket of this process: the
// same user, or root, who can act as any user anyway.
func (p Peer) Trusted() bool {
	return p.UID == 0 || int(p.UID) == os.Getuid()
}

// DefaultPath is the socket a user's service listens on and a stdio
// process looks for: $XDG_RUNTIME_DIR/pyrun.sock. Clients that start
// their servers with an environment of their own (FastMCP's
// StdioTransport passes none of the parent's) leave XDG_RUNTIME_DIR out;
// then it is the folder systemd makes for the user's manager,
// /run/user/UID, when that exists. Empty when there is neither.
func DefaultPath() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = filepath.Join("/run/user", strconv.Itoa(os.Getuid()))
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return ""
		}
	}
	return filepath.Join(dir, "pyrun.sock")
}

// ErrInUse is Listen's error when a server already answers at the path.
var ErrInUse = errors.New("a server already answers on this socket")

// Listen makes a Unix socket at path that only this user can connect to:
// the socket file is 0600 from the moment it exists (bind has no mode
// argument, so the umask is narrowed around it), and a folder Listen has to
// make is 0700. A socket file left by a server that is gone is replaced; a
// live one is not (ErrInUse), nor is anything that is not a socket. The
// socket file is removed when the listener closes.
func Listen(path string) (*net.UnixListener, error) {
	if path == "" {
		return nil, errors.New("no socket path")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if err := checkFolder(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	restore := narrowUmask()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	restore()
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The umask already made it 0600; this says so even where a file
	// system ignores the umask for sockets.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return ln, nil
}

// ErrUnsafeFolder is Listen's error when another user could remove or
// replace the socket file: its folder, or one above it, is writable by
// others or owned by another user.
var ErrUnsafeFolder = errors.New("another user could replace the socket there")

// checkFolder refuses dir when another user may change what is in it or
// above it, as ssh refuses a key file in such a folder: each folder from
// dir up to / must be owned by this user or root, and not writable by its
// group or others unless it has the sticky bit (as /tmp has: there, only
// a file's owner may remove or rename it). Clients check the server's peer
// (Dial), so a replaced socket would not get their code; but it would
// take their service from them, quietly.
func checkFolder(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("socket folder %s: %w", dir, err)
	}
	for d := real; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("socket folder %s: %w", d, err)
		}
		if why := folderDoubt(st.Mode(), ownerOf(st), os.Getuid()); why != "" {
			return fmt.Errorf("socket folder %s: %s: %w; pyrun will not serve there (use a folder of your own, e.g. --socket default)", d, why, ErrUnsafeFolder)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// folderDoubt says why a folder of mode and owner is unsafe for a socket of
// user me, or "".
func folderDoubt(mode fs.FileMode, owner uint32, me int) string {
	switch {
	case owner != 0 && int(owner) != me:
		return fmt.Sprintf("it belongs to uid %d, neither this user (uid %d) nor root", owner, me)
	case mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0:
		return fmt.Sprintf("its group or other users may write to it (mode %s, no sticky bit)", mode)
	}
	return ""
}

// removeStale removes a socket file at path that no server answers on.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; pyrun will not replace it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: %w (is another pyrun serve running?)", path, ErrInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove the stale socket %s: %w", path, err)
	}
	return nil
}

// Inherited are the listening sockets systemd passed this process (socket
// activation: LISTEN_PID is this process, LISTEN_FDS counts descriptors
// from 3), or none. The variables are unset and the descriptors made
// close-on-exec, so that the workers pyrun starts inherit neither.
// Sockets of other kinds than listening Unix or TCP stream sockets are an
// error: pyrun would not know what to serve on them.
func Inherited() ([]net.Listener, error) {
	pid, _ := strconv.Atoi(os.Getenv("LISTEN_PID"))
	n, _ := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if pid != os.Getpid() || n <= 0 {
		return nil, nil
	}
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	const first = 3 // SD_LISTEN_FDS_START
	var lns []net.Listener
	for fd := first; fd < first+n; fd++ {
		closeOnExec(fd)
		f := os.NewFile(uintptr(fd), "LISTEN_FD_"+strconv.Itoa(fd))
		ln, err := net.FileListener(f) // a copy of the descriptor
		f.Close()
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("socket activation: descriptor %d is not a listening stream socket: %w", fd, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Dial connects to the server at path and checks that it runs as this
// user or as root: a socket another user made (in a shared folder) is not
// trusted with this client's code and data.
func Dial(path string, timeout time.Duration) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	p, err := PeerOf(uc)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if !p.Trusted() {
		uc.Close()
		return nil, fmt.Errorf("socket %s: its server runs as uid %d, not as this user (uid %d) or root: not using it", path, p.UID, os.Getuid())
	}
	return uc, nil
}

// Package redisrun starts Debian's redis-server for a test: on a free
// loopback port, without persistence, stopped when the test ends. The
// session store's tests (supervisor/checkpoint) and pyrun's own
// (cmd/pyrun) share it.
package redisrun

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testtier"
)

// Start runs redis-server and returns its URL (redis://127.0.0.1:PORT/0)
// and port once it listens.
func Start(t testing.TB) (url string, port int) {
	t.Helper()
	testtier.Needs(t, "redis-server")
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (Debian package redis-server; .ci/run installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "redis://" + addr + "/0", port
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not listen: %v", err)
		}
	}
}

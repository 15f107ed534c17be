package mcptest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DialFrom opens a TCP connection to addr from the loopback address from
// (127.0.0.2 and so on are other clients to pyrun), with a small receive
// buffer so that a test that stops reading stalls pyrun's writes soon. It
// is closed with the test.
func DialFrom(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)},
		Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				setReceiveBuffer(fd, 4096)
			})
		},
	}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// IdleTimeoutClient is an HTTP client whose connections fail a read that
// waits longer than idle, like httpx's read timeout and proxies that drop
// quiet connections.
func IdleTimeoutClient(idle time.Duration) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: idle}, nil
		},
	}}
}

type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

// StalledSSE opens an HTTP+SSE session from a connection of DialFrom(t,
// "127.0.0.1", addr), reads as far as its endpoint event and no further: a
// client that stops reading its event stream. It returns the session's POST
// URL (path and query) and a function that POSTs one JSON-RPC message to it,
// returning the status (0 when the POST failed).
func StalledSSE(t testing.TB, addr string) (endpoint string, post func(body string) int) {
	t.Helper()
	c := DialFrom(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "GET /sse HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", addr)
	br := bufio.NewReader(c)
	for endpoint == "" {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading /sse: %v", err)
		}
		if rest, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(rest, "sessionid=") {
			endpoint = strings.TrimSpace(rest)
		}
	}
	hc := &http.Client{Timeout: time.Minute}
	return endpoint, func(body string) int {
		resp, err := hc.Post("http://"+addr+endpoint, "application/json", strings.NewReader(body))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// StalledPost POSTs body to /mcp of addr in session id (Streamable HTTP)
// from a connection of DialFrom(t, "127.0.0.1", addr), and never reads the
// response: a client that stops reading its call's result.
func StalledPost(t testing.TB, addr, session, body string) {
	t.Helper()
	c := DialFrom(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: %d\r\n\r\n%s",
		addr, session, len(body), body)
}

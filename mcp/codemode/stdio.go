package codemode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/idscan"
)

// commandTransport starts a stdio MCP server and connects to it, as the
// SDK's CommandTransport does (newline-delimited JSON over its stdin and
// stdout; Close closes stdin, then signals), but reads what the server
// writes through a guard: a line past the limit is skipped without being
// held, and a line that is not a JSON-RPC message is skipped; either fails
// the call it answers and leaves the connection up. The SDK's transport
// ends the connection at the first such line.
type commandTransport struct {
	cmd *exec.Cmd
	// terminate is how long Close waits for the server after closing its
	// stdin, and again after SIGTERM, before SIGKILL.
	terminate time.Duration
	guard     *guard
}

func (t *commandTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	c := &lineConn{cmd: t.cmd, stdin: stdin, guard: t.guard, terminate: t.terminate,
		incoming: make(chan lineItem), closed: make(chan struct{})}
	go c.readLoop(stdout)
	return c, nil
}

// lineConn is the connection of a commandTransport. Read, Write and Close
// are safe for concurrent use, as sdk.Connection asks.
type lineConn struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	guard     *guard
	terminate time.Duration

	incoming chan lineItem // from readLoop
	writeMu  sync.Mutex

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: readLoop stops
	closeErr  error
}

type lineItem struct {
	msg jsonrpc.Message
	err error
}

// readLoop reads the server's stdout until it ends or the connection is
// closed, handing each message to Read.
func (c *lineConn) readLoop(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		msg, err := c.next(br)
		if msg == nil && err == nil {
			continue // a line skipped
		}
		select {
		case c.incoming <- lineItem{msg, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// next reads one line and returns its message; nil and no error for a
// line that is blank, or refused and answering no call. A line past the
// limit is read through without being kept.
func (c *lineConn) next(br *bufio.Reader) (jsonrpc.Message, error) {
	limit := c.guard.max
	var line []byte
	var sc idscan.Scanner
	size, over := 0, false
	for {
		frag, err := br.ReadSlice('\n')
		size += len(frag)
		switch {
		case over:
			_, _ = sc.Write(frag)
		case len(line)+len(frag) > limit+2: // +2: the line's end, \r\n
			over = true
			_, _ = sc.Write(line)
			_, _ = sc.Write(frag)
			line = nil
		default:
			line = append(line, frag...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			// The server's stdout ended (or broke): a last line without
			// its end is not a message.
			return nil, err
		}
		break
	}
	line = bytes.TrimRight(line, "\r\n")
	if !over && len(line) > limit {
		over = true
		_, _ = sc.Write(line)
	}
	if over {
		return c.guard.refuseIn(&sc, RefusedTooLarge, size, errTooLarge), nil
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, nil
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		_, _ = sc.Write(line)
		return c.guard.refuseIn(&sc, RefusedMalformed, size, err), nil
	}
	return msg, nil
}

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case it := <-c.incoming:
		return it.msg, it.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode a message: %w", err)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err = c.stdin.Write(append(data, '\n'))
	return err
}

// Close closes the server's stdin and waits for it to exit: after
// terminate, it is sent SIGTERM, and after terminate again, SIGKILL.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.stop()
		close(c.closed)
	})
	return c.closeErr
}

func (c *lineConn) stop() error {
	_ = c.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(c.terminate)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if c.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	_ = c.cmd.Process.Kill()
	return <-exited
}

func (c *lineConn) SessionID() string { return "" }

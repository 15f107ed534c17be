// Package pyrunserve builds pyrun (for the scripts under scripts/ and the
// binary's own end-to-end tests) and runs `pyrun serve` for the load
// scripts (soak, memattack): on a free port, waited for until its workers
// are ready so that start-up is not measured, and stopped as a service
// manager would.
package pyrunserve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pyrun/pyrun/internal/syncbuf"
)

// startWait bounds how long Start waits for pyrun to listen and then for
// its workers: a first start provisions the runtime, which takes minutes.
const startWait = 5 * time.Minute

// Build builds cmd/pyrun into dir and returns the binary's path; go build's
// output goes to log.
func Build(ctx context.Context, dir string, log io.Writer) (string, error) {
	bin := filepath.Join(dir, "pyrun")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pyrun/pyrun/cmd/pyrun")
	build.Stdout, build.Stderr = log, log
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build pyrun: %w", err)
	}
	return bin, nil
}

// Server is a running `pyrun serve`.
type Server struct {
	Cmd  *exec.Cmd
	Base string // http://127.0.0.1:port
	// Log is the end of pyrun's output (its JSON log), for errors.
	Log  *syncbuf.Buffer
	done chan struct{}
}

// Start runs `bin serve --listen 127.0.0.1:0 --log-format json --log-level
// info args...` and waits until it listens and at least workers of its
// workers are ready.
func Start(ctx context.Context, bin string, workers int, args ...string) (*Server, error) {
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, args...)
	cmd := exec.Command(bin, args...)
	pr, pw := io.Pipe()
	s := &Server{Cmd: cmd, Log: &syncbuf.Buffer{Max: 16 << 10}, done: make(chan struct{})}
	cmd.Stderr = pw
	cmd.Stdout = s.Log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pyrun serve: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(s.done)
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = s.Log.Write(append(line, '\n'))
			var rec struct {
				Message string `json:"@message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Message == "listening" {
				addr <- rec.Addr
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		s.Base = "http://" + a
	case <-s.done:
		return nil, fmt.Errorf("pyrun serve exited: %s", s.Log)
	case <-time.After(startWait):
		s.Stop()
		return nil, fmt.Errorf("pyrun serve did not listen: %s", s.Log)
	case <-ctx.Done():
		s.Stop()
		return nil, ctx.Err()
	}
	for deadline := time.Now().Add(startWait); ; {
		if n, err := s.WorkersReady(); err == nil && n >= workers {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("pyrun's workers did not become ready: %s", s.Log)
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("pyrun serve exited: %s", s.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WorkersReady is /healthz's workers_ready.
func (s *Server) WorkersReady() (int, error) {
	resp, err := http.Get(s.Base + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var h struct {
		WorkersReady int `json:"workers_ready"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h.WorkersReady, err
}

// Stop ends pyrun as a service manager would: SIGTERM, then SIGKILL after
// 30 seconds.
func (s *Server) Stop() {
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-s.done
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrun/pyrun/mcp/mcptest"
)

// prlimit runs a command under other resource limits; it execs the
// command, so the PID it was started as is the command's. It is util-linux's,
// which Debian marks Essential: every Debian machine .ci/run runs on has it.
const prlimit = "/usr/bin/prlimit"

// With file descriptors short a crashed worker is still replaced: clients
// that open connection after connection get a 503 once pyrun holds as many
// as leave 64 + 32 per worker (twice the pool) descriptors free under its open-files limit
// (serve.go's default max_conns), rather than taking all its descriptors,
// so the new worker's pipes can still be made. Before the cap (issue 12,
// item 2) /healthz timed out and the replacement failed with "pipe2: too
// many open files". Run with `--max-conns 100000` added (no headroom), this
// test fails as that did: 237 of the 320 connections held, none refused
// (pyrun at 256 of 256 descriptors), a new connection left unanswered, and
// the replacement worker failing to start with "pipe2: too many open files".
// With the default cap: 127 held (and the test's own), 193 refused with a
// 503, 146 descriptors open, the worker replaced and the call run.
//
// Everything the test asks of pyrun while the connections are held goes
// over one connection opened before them and kept alive.
func TestServeWorkerReplacedWithDescriptorsShort(t *testing.T) {
	if _, err := os.Stat(prlimit); err != nil {
		t.Fatalf("%s (util-linux) is needed to start pyrun under a low open-files limit: %v", prlimit, err)
	}
	const (
		nofile  = 256
		workers = 2
		reserve = 64 + 32*2*workers // serve.go's headroom: max_conns = nofile - reserve
		flood   = nofile + 64       // more than pyrun could hold were it to take them all
	)
	// Hard and soft limits both: Go raises the soft limit to the hard one at
	// start. The per-address cap is out of the way, so the total cap is what
	// binds; the header timeout does not close the idle connections mid-test.
	s := startServeUnder(t, []string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile)},
		"--workers", strconv.Itoa(workers), "--max-conns-per-addr", "100000", "--header-timeout", "5m",
		"--session-spares", "0") // its children are the pool's workers only
	pid := s.cmd.Process.Pid

	var dials atomic.Int32
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	ready := func(what string, ok func(health) bool) health {
		t.Helper()
		deadline := time.Now().Add(callTimeout)
		for {
			h := s.healthVia(t, hc)
			if ok(h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: /healthz still says %+v", what, h)
			}
			<-time.After(50 * time.Millisecond) // polling what pyrun reports, not synchronising
		}
	}
	ready("both workers ready", func(h health) bool { return h.WorkersReady == workers })

	// The flood: idle connections, each read until pyrun closes it.
	var refused atomic.Int32
	var readers sync.WaitGroup
	conns := make([]net.Conn, 0, flood)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
		readers.Wait()
	})
	for range flood {
		c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
		readers.Add(1)
		go func() {
			defer readers.Done()
			b, _ := io.ReadAll(c)
			if strings.HasPrefix(string(b), "HTTP/1.1 503") {
				refused.Add(1)
			}
		}()
	}
	// Every connection is either held by pyrun or refused, once pyrun has
	// accepted them all; without the cap the rest wait in the kernel's
	// backlog and this never holds.
	var m map[string]float64
	deadline := time.Now().Add(15 * time.Second)
	for {
		m = s.metricsVia(t, hc)
		if m["pyrun_connections_open"]+m["pyrun_connections_refused_total"] >= flood+1 || time.Now().After(deadline) {
			break
		}
		<-time.After(50 * time.Millisecond)
	}
	held := int(m["pyrun_connections_open"]) - 1 // not the one the test keeps
	t.Logf("%d of %d connections held, %v refused by max_conns (%d saw the 503); pyrun has %d of %d descriptors open",
		held, flood, m["pyrun_connections_refused_total"], refused.Load(), openFDs(t, pid), nofile)
	if held+1 > nofile-reserve || m["pyrun_connections_refused_total"] < 1 {
		t.Errorf("pyrun held %d connections (and the test's own) and refused %v; want at most %d in all under an open-files limit of %d, the rest refused",
			held, m["pyrun_connections_refused_total"], nofile-reserve, nofile)
	}
	if h := s.healthVia(t, hc); h.code != http.StatusOK {
		t.Errorf("/healthz with the connections held: %+v", h)
	}
	// A newcomer is told at once, rather than left waiting in the backlog
	// (pyrun answers at accept, before a request: read it raw).
	probe := mcptest.DialFrom(t, "127.0.0.1", s.addr)
	if got, closed := readWithin(probe, 10*time.Second); !closed || !strings.HasPrefix(got, "HTTP/1.1 503") || !strings.Contains(got, "max_conns") {
		t.Errorf("a new connection with the connections held: closed %v, %q; want a 503 naming max_conns within 10 s", closed, clipText(got))
	}

	// A worker crashes while all those connections are held.
	before := workerPIDs(t, pid)
	if len(before) != workers {
		t.Fatalf("pyrun's child processes: %v, want its %d workers", before, workers)
	}
	mark := s.log.mark()
	killPID(t, before[0])
	deadline = time.Now().Add(40 * time.Second)
	for {
		for _, r := range s.log.since(mark) {
			if r.msg() == "worker failed to start" {
				t.Fatalf("no replacement for the killed worker: %s", r.str("error"))
			}
		}
		h := s.healthVia(t, hc)
		if now := workerPIDs(t, pid); !slices.Contains(now, before[0]) && len(now) == workers && h.WorkersReady == workers {
			t.Logf("worker %d killed, replaced by %v", before[0], now)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed worker %d was not replaced within 40 s: /healthz says %+v, children %v", before[0], h, workerPIDs(t, pid))
		}
		<-time.After(50 * time.Millisecond)
	}

	// And calls run, over the same connection.
	id, code, body := openSession(t, hc, s.base)
	if id == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	resp := postMCP(t, hc, s.base, id, callLine(2, "print(sum(range(10)))"))
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := toolResult(string(b))
	if err != nil || sc.Status != "success" || strings.TrimSpace(sc.Stdout) != "45" {
		t.Errorf("run_python_code with the connections held: %d %v %+v; want success printing 45\n%s", resp.StatusCode, err, sc, clipText(string(b)))
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the test's own client opened %d connections, want 1 (kept alive throughout)", n)
	}
}

// toolResult is the structured result of a tools/call answered as JSON or as
// an event stream.
func toolResult(body string) (structured, error) {
	msg := body
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "data:"); ok && strings.Contains(rest, `"id"`) {
			msg = rest
		}
	}
	var rpc struct {
		Result *struct {
			StructuredContent structured `json:"structuredContent"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(msg), &rpc); err != nil {
		return structured{}, fmt.Errorf("answer does not parse: %w", err)
	}
	if rpc.Result == nil {
		if rpc.Error != nil {
			return structured{}, fmt.Errorf("JSON-RPC error: %s", rpc.Error.Message)
		}
		return structured{}, fmt.Errorf("no result")
	}
	return rpc.Result.StructuredContent, nil
}

// workerPIDs are pyrun's child processes, its workers, in order.
func workerPIDs(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("pyrun's threads: %v", err)
	}
	var pids []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, n) {
				pids = append(pids, n)
			}
		}
	}
	slices.Sort(pids)
	return pids
}

// openFDs counts the descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

//go:build unix

package main

// The load-balanced run (-only lb): the same load against one pyrun
// instance pinned to one core and against two instances pinned to one core
// each, both behind nginx running the shipped configs/nginx/pyrun.conf. The
// ratio of their throughputs is what a second instance buys.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/nginxrun"
	"github.com/pyrun/pyrun/internal/procfs"
)

// lbReport compares the two set-ups under the same load.
type lbReport struct {
	Calls       int       `json:"calls"`
	Concurrency int       `json:"concurrency"`
	Code        string    `json:"code"`
	One         lbRun     `json:"one_instance_one_core"`
	Two         lbRun     `json:"two_instances_two_cores"`
	Speedup     float64   `json:"speedup"`
	Load        [3]string `json:"load_average_before_one_two"`
}

type lbRun struct {
	CallsPerS float64   `json:"calls_per_s"`
	P50MS     float64   `json:"p50_ms"`
	P99MS     float64   `json:"p99_ms"`
	PerInst   []float64 `json:"calls_per_instance"`
	CPUPerS   []float64 `json:"cpu_s_per_s_per_instance"` // pyrun and its worker, per second of the run
}

// lbConcurrency is the load: -cpu-calls 50 ms CPU calls from eight
// clients at once, enough to keep every worker busy.
const lbConcurrency = 8

func benchLB(ctx context.Context, o *opts) (*lbReport, error) {
	if runtime.NumCPU() < 2 {
		return nil, errors.New("needs at least two cores")
	}
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if nginx, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			return nil, errors.New("nginx is not installed (Debian: apt-get install nginx)")
		}
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, errors.New("taskset is not installed (Debian: util-linux)")
	}
	conf, err := os.ReadFile(o.nginxConf)
	if err != nil {
		return nil, fmt.Errorf("the nginx config (-nginx-conf): %w", err)
	}
	rep := &lbReport{Calls: o.cpuCalls, Concurrency: lbConcurrency, Code: "50 ms of Python CPU, then print"}
	rep.Load[0] = loadAverage()
	for i, cores := range [][]int{{0}, {0, 1}} {
		r, err := lbOnce(ctx, o, nginx, taskset, string(conf), cores)
		if err != nil {
			return nil, fmt.Errorf("%d instance(s): %w", len(cores), err)
		}
		if i == 0 {
			rep.One = *r
		} else {
			rep.Two = *r
		}
		if i+1 < len(rep.Load) {
			rep.Load[i+1] = loadAverage()
		}
	}
	if rep.One.CallsPerS > 0 {
		rep.Speedup = round2(rep.Two.CallsPerS / rep.One.CallsPerS)
	}
	return rep, nil
}

// lbOnce starts one `pyrun serve --stateless --workers 1` per core in
// cores, pinned to it, puts nginx in front and runs the load through it.
func lbOnce(ctx context.Context, o *opts, nginx, taskset, conf string, cores []int) (*lbRun, error) {
	var addrs []string
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	for _, core := range cores {
		cmd := exec.Command(taskset, "-c", strconv.Itoa(core), o.bin, "serve", "--listen", "127.0.0.1:0",
			"--log-format", "json", "--runtime-dir", o.runtimeDir,
			"--stateless", "--workers", "1", "--max-queue", "256")
		lw := newLogWatcher()
		cmd.Stderr = lw
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, cmd)
		var addr string
		err := lw.waitFor(ctx, "pyrun serve to listen", func(_, _ []time.Time) bool {
			addr = lw.addr
			return addr != ""
		})
		if err != nil {
			return nil, fmt.Errorf("pyrun serve on core %d: %w\n%s", core, err, lw.tail())
		}
		if err := waitReady(ctx, addr); err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	base, stop, err := runNginx(ctx, nginx, conf, addrs)
	if err != nil {
		return nil, err
	}
	defer stop()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * lbConcurrency}}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench-lb", Version: "1"}, nil)
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect through nginx: %w", err)
	}
	defer session.Close()
	p := &pyrunProc{session: session}

	cpuCalls(ctx, p, lbConcurrency, 4*len(cores)) // warm every worker
	before := make([]time.Duration, len(procs))
	served := make([]float64, len(procs))
	for i, c := range procs {
		before[i] = treeCPU(c.Process.Pid)
		if served[i], err = callsTotal(ctx, addrs[i]); err != nil {
			return nil, err
		}
	}
	l := cpuCalls(ctx, p, lbConcurrency, o.cpuCalls)
	if len(l.errs) > 0 {
		return nil, fmt.Errorf("%d of %d calls failed; the first: %w", len(l.errs), o.cpuCalls, l.errs[0])
	}
	if l.mixed > 0 {
		return nil, fmt.Errorf("%d of %d calls did not get their own output", l.mixed, o.cpuCalls)
	}
	s := newSeries(l.ds)
	r := &lbRun{CallsPerS: round1(float64(o.cpuCalls) / l.wall.Seconds()), P50MS: s.P50MS, P99MS: s.P99MS}
	for i, c := range procs {
		r.CPUPerS = append(r.CPUPerS, round2((treeCPU(c.Process.Pid)-before[i]).Seconds()/l.wall.Seconds()))
		n, err := callsTotal(ctx, addrs[i])
		if err != nil {
			return nil, err
		}
		r.PerInst = append(r.PerInst, n-served[i])
	}
	return r, nil
}

// treeCPU is the CPU time of pid (taskset execs pyrun in place) and its
// children (the workers).
func treeCPU(pid int) time.Duration {
	t, _ := cpuTime(pid)
	for _, c := range procfs.Children(pid) {
		d, _ := cpuTime(c)
		t += d
	}
	return t
}

func waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no ready worker", addr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// callsTotal reads pyrun_calls_total from an instance's /metrics.
func callsTotal(ctx context.Context, addr string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "pyrun_calls_total") {
			i := strings.LastIndexByte(line, ' ')
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			n += v
		}
	}
	return n, sc.Err()
}

// shippedAddrs are the instance addresses written in the shipped config.
var shippedAddrs = []string{"127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"}

// runNginx runs nginx with conf, its instances replaced by addrs (lines
// naming an instance beyond len(addrs) are dropped), on a free port.
func runNginx(ctx context.Context, bin, conf string, addrs []string) (base string, stop func(), err error) {
	var lines []string
	for line := range strings.Lines(conf) {
		for i, a := range shippedAddrs {
			if strings.Contains(line, a) {
				if i >= len(addrs) {
					line = ""
				} else {
					line = strings.ReplaceAll(line, a, addrs[i])
				}
			}
		}
		lines = append(lines, line)
	}
	conf = strings.Join(lines, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	conf = strings.Replace(conf, "listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port), 1)
	dir, err := os.MkdirTemp("", "pyrun-bench-nginx-")
	if err != nil {
		return "", nil, err
	}
	mainConf, err := nginxrun.WritePrefix(dir, conf, nginxrun.Main{Workers: 1, ErrorLevel: "warn"})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", mainConf)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return base, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("nginx does not answer: %w", err)
		}
		select {
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

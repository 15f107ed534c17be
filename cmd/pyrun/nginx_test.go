package main

// TestNginx runs the shipped configs/nginx/pyrun.conf, as it is but for its
// addresses, with Debian's nginx on loopback in front of three `pyrun serve
// --stateless` instances (docs/contract.md section 12): calls spread over every
// instance, MCP clients of both revision families work through it, a
// Python session's calls all reach the instance that holds it, and a
// rolling restart of every instance with SIGTERM loses no call and no
// session's state (the instances share the default dir: session store).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/nginxrun"
)

// shippedUpstreams are the instance addresses written in the shipped file.
var shippedUpstreams = []string{"127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003"}

// lb is nginx running the shipped config in front of pyrun instances.
type lb struct {
	base  string // http://127.0.0.1:port
	dir   string
	cmd   *exec.Cmd
	exitc chan error
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startNginx runs nginx (Debian's package; .ci/run installs it) with the
// shipped config, its instance addresses replaced by addrs.
func startNginx(t *testing.T, addrs []string) *lb {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			t.Fatal("nginx is not installed (Debian: apt-get install nginx; .ci/run does)")
		}
	}
	conf, err := os.ReadFile(filepath.Join("..", "..", "configs", "nginx", "pyrun.conf"))
	if err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	text := string(conf)
	if !strings.Contains(text, "listen 8080;") {
		t.Fatal("the shipped config no longer listens on 8080: update this test")
	}
	text = strings.Replace(text, "listen 8080;", "listen "+listen+";", 1)
	for i, a := range shippedUpstreams {
		if !strings.Contains(text, a) {
			t.Fatalf("the shipped config no longer names %s: update this test", a)
		}
		text = strings.ReplaceAll(text, a, addrs[i])
	}
	dir := t.TempDir()
	mainConf, err := nginxrun.WritePrefix(dir, text, nginxrun.Main{Workers: 2, ErrorLevel: "info",
		AccessLogFormat: "$status $upstream_addr $upstream_status $request_method $request_uri sid=$http_mcp_param_session_id "})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", mainConf).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	l := &lb{base: "http://" + listen, dir: dir, exitc: make(chan error, 1)}
	l.cmd = exec.Command(bin, "-p", dir, "-c", mainConf)
	var stderr bytes.Buffer
	l.cmd.Stdout, l.cmd.Stderr = &stderr, &stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.exitc <- l.cmd.Wait() }()
	t.Cleanup(func() {
		_ = l.cmd.Process.Signal(syscall.SIGQUIT) // graceful stop
		select {
		case <-l.exitc:
		case <-time.After(20 * time.Second):
			_ = l.cmd.Process.Kill()
			<-l.exitc
		}
		if t.Failed() {
			t.Logf("nginx: %s\nerror.log:\n%s", stderr.String(), l.tail("error.log", 40))
		}
	})
	// Wait until nginx answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(l.base + "/")
		if err == nil {
			resp.Body.Close()
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not answer on %s: %v\n%s", listen, err, stderr.String())
		}
		<-time.After(50 * time.Millisecond)
	}
}

// tail returns the last n lines of one of nginx's logs.
func (l *lb) tail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(l.dir, name))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// retryRefused is the client's HTTP transport: it resends a request that
// the load balancer refused (502, 503: no instance took it, or a stopping
// instance turned it away before it ran) and counts those, and nothing
// else. A call whose answer was lost some other way fails.
type retryRefused struct {
	retries atomic.Int64
}

func (rt *retryRefused) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	for attempt := 0; ; attempt++ {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil || (resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusServiceUnavailable) || attempt == 50 {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rt.retries.Add(1)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
}

// lbSession connects an MCP client at revision (the SDK's latest when
// empty) to the load balancer's /mcp through rt.
func lbSession(t *testing.T, base, revision string, rt http.RoundTripper) *server {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-nginx-e2e", Version: "test"}, nil)
	cs, err := client.Connect(t.Context(), tr, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect through nginx at %q: %v", revision, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &server{session: cs}
}

// callsServed is the number of calls an instance has answered.
func callsServed(t *testing.T, s *httpServer) float64 {
	t.Helper()
	var n float64
	for k, v := range s.metrics(t) {
		if strings.HasPrefix(k, "pyrun_calls_total") {
			n += v
		}
	}
	return n
}

func TestNginx(t *testing.T) {
	needBinary(t)
	args := []string{"--stateless", "--workers", "1", "--timeout", "2m"}
	// The instance names the shipped map routes on: pyrun-1, pyrun-2, ...
	argsOf := func(i int) []string { return append(slices.Clone(args), "--instance-id", fmt.Sprintf("pyrun-%d", i+1)) }
	instances := make([]*httpServer, len(shippedUpstreams))
	addrs := make([]string, len(instances))
	for i := range instances {
		instances[i] = startServe(t, argsOf(i)...)
		addrs[i] = instances[i].addr
	}
	for _, s := range instances {
		s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	}
	l := startNginx(t, addrs)
	rt := &retryRefused{}

	t.Run("calls spread over every instance", func(t *testing.T) {
		s := lbSession(t, l.base, "", rt)
		if v := s.session.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Errorf("through nginx the go-sdk client negotiated %q, want 2026-07-28", v)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 30)
		for i := range 30 {
			wg.Go(func() {
				r, err := s.call(t.Context(), map[string]any{"python_code": fmt.Sprintf("print(%d)", i)})
				if err == nil && r.sc.Stdout != fmt.Sprintf("%d\n", i) {
					err = fmt.Errorf("call %d printed %q", i, r.sc.Stdout)
				}
				if err != nil {
					errs <- err
				}
			})
			if i%3 == 2 {
				wg.Wait() // three at a time: one per instance's worker
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var counts []float64
		for _, inst := range instances {
			counts = append(counts, callsServed(t, inst))
		}
		t.Logf("calls per instance: %v", counts)
		for i, n := range counts {
			if n < 3 {
				t.Errorf("instance %d (%s) answered %v of 30 calls; want them spread over all three", i, addrs[i], n)
			}
		}
	})

	t.Run("an older client through nginx", func(t *testing.T) {
		// 2025-11-25 on --stateless instances: every POST stands alone,
		// so any instance may answer it.
		s := lbSession(t, l.base, "2025-11-25", rt)
		for i := range 6 {
			r, err := s.call(t.Context(), map[string]any{"python_code": fmt.Sprintf("print('old %d')", i)})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, r, "success")
		}
	})

	t.Run("a session's calls reach its instance", func(t *testing.T) {
		// The go-sdk client mirrors session_id into Mcp-Param-Session-Id
		// (the schema's x-mcp-header) once it has listed the tools.
		s := lbSession(t, l.base, "", rt)
		if _, err := s.session.ListTools(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		r := s.inSession(t, "new", "x = 0")
		id := r.sc.SessionID
		home := -1
		for i := range instances {
			if strings.HasPrefix(id, fmt.Sprintf("pyrun-%d.", i+1)) {
				home = i
			}
		}
		if home < 0 {
			t.Fatalf("session id %s names none of the instances", id)
		}
		before := make([]float64, len(instances))
		for i, inst := range instances {
			before[i] = callsServed(t, inst)
		}
		for n := 1; n <= 10; n++ {
			wantValue(t, s.inSession(t, id, "x += 1\nx"), fmt.Sprint(n))
		}
		for i, inst := range instances {
			got := callsServed(t, inst) - before[i]
			if want := map[bool]float64{true: 10, false: 0}[i == home]; got != want {
				t.Errorf("instance pyrun-%d answered %v of the session's ten calls, want %v", i+1, got, want)
			}
		}
		// The header reached nginx: its log shows it, with the instance.
		var routed int
		for _, line := range strings.Split(l.tail("access.log", 200), "\n") {
			if strings.Contains(line, " sid="+id+" ") && strings.Contains(line, " "+addrs[home]+" ") {
				routed++
			}
		}
		if routed < 10 {
			t.Errorf("nginx logged %d requests with Mcp-Param-Session-Id %s sent to %s, want 10:\n%s", routed, id, addrs[home], l.tail("access.log", 15))
		}
		// Another instance, asked directly, takes the session over from
		// the store they share, with its live state (its home hands it
		// over), and the next call through nginx moves it back home:
		// neither answers from a stale copy.
		other := (home + 1) % len(instances)
		direct := (&httpServer{t: t, base: instances[other].base}).connect(t, "mcp", "", nil)
		wantValue(t, direct.inSession(t, id, "x += 1\nx"), "11")
		wantValue(t, s.inSession(t, id, "x += 1\nx"), "12")
	})

	t.Run("health through nginx", func(t *testing.T) {
		resp, err := http.Get(l.base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"ok"`) {
			t.Errorf("/healthz through nginx: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("rolling restart loses no call", func(t *testing.T) {
		s := lbSession(t, l.base, "", rt)
		before := rt.retries.Load()
		ctx, stop := context.WithCancel(t.Context())
		var (
			mu       sync.Mutex
			ok       int
			failures []error
		)
		var wg sync.WaitGroup
		// A Python session's calls go on through the restart of its
		// instance: each sees the state the one before it left.
		sess := lbSession(t, l.base, "", rt)
		if _, err := sess.session.ListTools(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		sid := sess.inSession(t, "new", "n = 0").sc.SessionID
		sessionCalls := 0
		wg.Go(func() {
			for ctx.Err() == nil {
				r, err := sess.call(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(0.2)\nn += 1\nn", "session_id": sid})
				if err == nil && (r.sc.Status != "success" || strings.TrimSpace(string(r.sc.ReturnValue)) != fmt.Sprint(sessionCalls+1)) {
					err = fmt.Errorf("session call %d: %s %s, want %d (the state the call before left)\n%s", sessionCalls+1, r.sc.Status, r.sc.ReturnValue, sessionCalls+1, r.text)
				}
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					sessionCalls++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
		for g := range 3 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					// Calls that run a while, so that some are running
					// on an instance when it is told to stop.
					code := fmt.Sprintf("import time\ntime.sleep(0.3)\nprint('%d-%d')", g, i)
					r, err := s.call(t.Context(), map[string]any{"python_code": code})
					if err == nil && r.sc.Stdout != fmt.Sprintf("%d-%d\n", g, i) {
						err = fmt.Errorf("printed %q", r.sc.Stdout)
					}
					mu.Lock()
					if err != nil {
						failures = append(failures, err)
					} else {
						ok++
					}
					mu.Unlock()
				}
			})
		}
		for i, old := range instances {
			// A call of its own is running on the instance when it gets
			// SIGTERM: it must finish, while the instance is out.
			long := make(chan error, 1)
			n := newNotes()
			direct := (&httpServer{t: t, base: old.base}).connectWith(t, "mcp", "", nil, n.clientOptions())
			tok := fmt.Sprintf("drain-%d", i)
			go func() {
				r, err := direct.callWith(t.Context(), tok, map[string]any{"python_code": "import time\ntime.sleep(2)\nprint('drained')"})
				if err == nil && r.sc.Stdout != "drained\n" {
					err = fmt.Errorf("the draining call printed %q", r.sc.Stdout)
				}
				long <- err
			}()
			// Its progress says when it has a worker (it may wait behind a
			// call from the load).
			n.waitProgress(t, tok, "running for")
			old.signal(syscall.SIGTERM)
			// Draining: the instance takes no new connection, so /healthz
			// (readiness) fails and nginx sends calls elsewhere.
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := http.Get(old.base + "/healthz")
				if err != nil {
					break
				}
				code := resp.StatusCode
				resp.Body.Close()
				if code == http.StatusServiceUnavailable {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("instance %d still says %d on /healthz after SIGTERM", i, code)
				}
				<-time.After(20 * time.Millisecond)
			}
			if err := <-long; err != nil {
				t.Errorf("instance %d: a call running at SIGTERM: %v", i, err)
			}
			if code := old.wait(60 * time.Second); code != 0 {
				t.Fatalf("instance %d exited %d after SIGTERM, want 0", i, code)
			}
			// Its successor, on the same address.
			instances[i] = startServe(t, append(argsOf(i), "--listen", old.addr)...)
			instances[i].waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
		}
		stop()
		wg.Wait()
		retries := rt.retries.Load() - before
		t.Logf("rolling restart of %d instances: %d calls answered, %d failed, %d requests refused by nginx and resent; %d calls of one session kept its state",
			len(instances), ok, len(failures), retries, sessionCalls)
		if sessionCalls < 5 {
			t.Errorf("only %d calls of the session during the restart", sessionCalls)
		}
		for _, err := range failures {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a call failed during the rolling restart: %v", err)
			}
		}
		if ok < 10 {
			t.Errorf("only %d calls answered during the restart", ok)
		}
		if t.Failed() {
			t.Logf("nginx access log (last lines):\n%s", l.tail("access.log", 40))
		}
	})
}

package main

// End-to-end tests of access control: `pyrun serve` with a token file or an
// identity provider's JWTs, on a loopback port, driven by the go-sdk's MCP
// clients (Streamable HTTP and HTTP+SSE) carrying bearer tokens, and by raw
// HTTP where a client would not misbehave on its own (hijack attempts).

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/pyrun/pyrun/mcp/access/accesstest"
)

// bearer is an HTTP client transport that sends a bearer token (which the
// test may change) and remembers the URLs it POSTed to.
type bearer struct {
	mu    sync.Mutex
	token string
	posts []string
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	tok := b.token
	if r.Method == http.MethodPost {
		b.posts = append(b.posts, r.URL.String())
	}
	b.mu.Unlock()
	r = r.Clone(r.Context())
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (b *bearer) setToken(tok string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token = tok
}

// sessionURL is the SSE session's POST URL, once the client has POSTed.
func (b *bearer) sessionURL(t *testing.T) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range b.posts {
		if strings.Contains(u, "sessionid=") {
			return u
		}
	}
	t.Fatal("the SSE client has not POSTed to its session")
	return ""
}

// dial opens an MCP session with token over transport ("mcp" or "sse").
func (s *httpServer) dial(t *testing.T, transport, token string) (*server, *bearer, error) {
	t.Helper()
	b := &bearer{token: token}
	hc := &http.Client{Transport: b}
	var tr sdk.Transport
	if transport == "mcp" {
		tr = &sdk.StreamableClientTransport{Endpoint: s.base + "/mcp", HTTPClient: hc, MaxRetries: -1}
	} else {
		tr = &sdk.SSEClientTransport{Endpoint: s.base + "/sse", HTTPClient: hc}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-access-e2e", Version: "test"}, nil)
	cs, err := client.Connect(t.Context(), tr, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	if err != nil {
		return nil, b, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &server{session: cs}, b, nil
}

func (s *httpServer) mustDial(t *testing.T, transport, token string) (*server, *bearer) {
	t.Helper()
	c, b, err := s.dial(t, transport, token)
	if err != nil {
		t.Fatalf("connect over %s with a good token: %v", transport, err)
	}
	return c, b
}

// post sends a raw JSON-RPC message with token (none when empty) and
// extra headers, and returns the status and the WWW-Authenticate header.
func post(t *testing.T, url, token, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

const (
	initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	callBody       = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_python_code","arguments":{"python_code":"print('hijacked')"}}}`
)

// saveTokens writes a token file as an editor does: a new file renamed
// over the old one.
func saveTokens(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tokens.tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// twoClients writes a token file naming two clients, alice and bob, for the
// tests about what one client's calls can reach of another's; it returns
// its path and their tokens.
func twoClients(t *testing.T) (path, alice, bob string) {
	t.Helper()
	alice, bob = "alice-Qm4Zt8Lw1Xc7Vb2N", "bob-Hs9Pk3Rd6Fy0Jt5Gw1"
	path = filepath.Join(t.TempDir(), "tokens")
	saveTokens(t, path, "alice:"+alice+"\nbob:"+bob+"\n")
	return path, alice, bob
}

// callLines are the "call" log lines since mark, by client.
func (s *httpServer) callLines(mark int) map[string][]logRecord {
	out := map[string][]logRecord{}
	for _, r := range s.log.since(mark) {
		if r.msg() == "call" {
			out[r.str("client")] = append(out[r.str("client")], r)
		}
	}
	return out
}

// waitCalls waits until n "call" log lines have been written since mark.
func (s *httpServer) waitCalls(t *testing.T, mark, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	seen := 0
	if _, err := s.log.wait(ctx, mark, func(r logRecord) bool {
		if r.msg() == "call" {
			seen++
		}
		return seen == n
	}); err != nil {
		t.Fatalf("%d call log lines, want %d: %v", seen, n, err)
	}
}

func TestServeTokens(t *testing.T) {
	const (
		aliceToken = "alice-7Xv0rB9kGm1VtZcLwQ8s"
		bobToken   = "bob-Vb9Zt1kQ0mWx7LcR4pNs2H"
		aliceNext  = "alice-next-Hk2Lw9Qz7Xc1Vb5N"
	)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	saveTokens(t, tokens, "# clients of the test\nalice:"+aliceToken+"\n\nbob:"+bobToken+"\n")
	s := startServe(t, "--workers", "2", "--auth-token-file", tokens,
		"--client-max-calls", "1", "--client-max-queue", "1")
	s.metricsToken = bobToken
	s.waitHealth(t, "two ready workers", func(h health) bool { return h.WorkersIdle == 2 })
	secrets := []string{aliceToken, bobToken, aliceNext}

	t.Run("NoToken", func(t *testing.T) {
		for _, transport := range []string{"mcp", "sse"} {
			if _, _, err := s.dial(t, transport, ""); err == nil {
				t.Errorf("%s: a client without a token connected", transport)
			}
		}
		for _, url := range []string{s.base + "/mcp", s.base + "/sse", s.base + "/sse?sessionid=ABCDEF"} {
			if code, challenge := post(t, url, "", initializeBody, nil); code != http.StatusUnauthorized || challenge != `Bearer realm="pyrun"` {
				t.Errorf("POST %s without a token: %d, WWW-Authenticate %q; want 401 and a Bearer challenge", url, code, challenge)
			}
		}
		// /healthz stays open; /metrics needs a token (metrics_auth).
		s.health(t)
		if code, _ := getMetrics(t, s.base, ""); code != http.StatusUnauthorized {
			t.Errorf("GET /metrics without a token: %d, want 401", code)
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		mark := s.log.mark()
		for _, transport := range []string{"mcp", "sse"} {
			if _, _, err := s.dial(t, transport, "mallory-0123456789abcdefgh"); err == nil {
				t.Errorf("%s: a client with a wrong token connected", transport)
			}
		}
		for _, tok := range []string{"mallory-0123456789abcdefgh", aliceToken + "x", aliceToken[:len(aliceToken)-1]} {
			if code, _ := post(t, s.base+"/mcp", tok, initializeBody, nil); code != http.StatusUnauthorized {
				t.Errorf("a wrong token: %d, want 401", code)
			}
		}
		// Refusals are logged with why, and never with the token.
		r := s.log.waitMsg(t, mark, "access denied")
		if r.str("reason") == "" || r.str("remote") == "" {
			t.Errorf("access denied line without reason or remote address: %v", r)
		}
	})

	t.Run("GoodToken", func(t *testing.T) {
		mark := s.log.mark()
		viaMCP, _ := s.mustDial(t, "mcp", aliceToken)
		viaSSE, _ := s.mustDial(t, "sse", bobToken)
		wantValue(t, viaMCP.run(t, "6 * 7"), "42")
		wantValue(t, viaSSE.run(t, "'sse'"), `"sse"`)
		s.waitCalls(t, mark, 2)
		lines := s.callLines(mark)
		if len(lines["alice"]) != 1 || len(lines["bob"]) != 1 {
			t.Errorf("call log lines by client: %v; want one of alice's and one of bob's", lines)
		}
		for _, rs := range lines {
			for _, r := range rs {
				if r.str("session") == "" || r.str("status") != "success" {
					t.Errorf("call log line: %v", r)
				}
			}
		}
		if code, _ := getMetrics(t, s.base, bobToken); code != http.StatusOK {
			t.Errorf("GET /metrics with a token: %d", code)
		}
	})

	t.Run("SessionHijack", func(t *testing.T) {
		mark := s.log.mark()
		// Streamable HTTP: bob names alice's session.
		alice, _ := s.mustDial(t, "mcp", aliceToken)
		id := alice.session.ID()
		if id == "" {
			t.Fatal("no session id")
		}
		hdr := map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-06-18"}
		if code, _ := post(t, s.base+"/mcp", bobToken, callBody, hdr); code != http.StatusForbidden {
			t.Errorf("bob's call in alice's /mcp session: %d, want 403", code)
		}
		for _, method := range []string{"GET", "DELETE"} {
			req, _ := http.NewRequest(method, s.base+"/mcp", nil)
			req.Header.Set("Authorization", "Bearer "+bobToken)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("bob's %s of alice's /mcp session: %s, want 403", method, resp.Status)
			}
		}
		if code, _ := post(t, s.base+"/mcp", "", callBody, hdr); code != http.StatusUnauthorized {
			t.Errorf("a call in alice's /mcp session without a token: %d, want 401", code)
		}
		wantValue(t, alice.run(t, "'still mine'"), `"still mine"`)

		// HTTP+SSE: bob POSTs to alice's session URL.
		aliceSSE, b := s.mustDial(t, "sse", aliceToken)
		wantValue(t, aliceSSE.run(t, "1"), "1")
		url := b.sessionURL(t)
		if code, _ := post(t, url, bobToken, callBody, nil); code != http.StatusForbidden {
			t.Errorf("bob's call in alice's /sse session: %d, want 403", code)
		}
		if code, _ := post(t, url, "", callBody, nil); code != http.StatusUnauthorized {
			t.Errorf("a call in alice's /sse session without a token: %d, want 401", code)
		}
		wantValue(t, aliceSSE.run(t, "'still mine'"), `"still mine"`)
		// Only alice's three calls ran.
		s.waitCalls(t, mark, 3)
		lines := s.callLines(mark)
		if len(lines["alice"]) != 3 || len(lines) != 1 {
			t.Errorf("call log lines by client: %v; want alice's three only", lines)
		}
		if r := s.log.waitMsg(t, mark, "refused a request to another client's session"); r.str("client") != "bob" || r.str("owner") != "alice" {
			t.Errorf("refusal log line: %v", r)
		}
	})

	t.Run("PerClientLimits", func(t *testing.T) {
		// alice may have one call in the pool and one more waiting; her
		// third is refused, and bob gets the other worker at once.
		alice, _ := s.mustDial(t, "mcp", aliceToken)
		bob, _ := s.mustDial(t, "sse", bobToken)
		before := s.metrics(t)
		mark := s.log.mark()
		type outcome struct {
			r   *sdk.CallToolResult
			err error
			at  time.Time
		}
		outcomes := make(chan outcome, 3)
		for range 3 {
			go func() {
				r, err := alice.callRaw(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(2)\n'alice'"})
				outcomes <- outcome{r, err, time.Now()}
			}()
		}
		first := <-outcomes // the refusal comes at once
		if first.err != nil || !first.r.IsError || !strings.Contains(textOf(first.r), "client_max_calls") || !strings.Contains(textOf(first.r), "alice") {
			t.Fatalf("alice's third call: %v %v; want a tool error naming her and the limit", first.err, first.r)
		}
		r := bob.run(t, "'bob'")
		bobDone := time.Now()
		wantValue(t, r, `"bob"`)
		var last time.Time
		for range 2 {
			o := <-outcomes
			if o.err != nil || o.r.IsError {
				t.Fatalf("alice's call: %v %v", o.err, o.r)
			}
			last = o.at
		}
		if !bobDone.Before(last) {
			t.Errorf("bob's quick call ended after alice's calls: bob waited for her")
		}
		s.waitCalls(t, mark, 4)
		lines := s.callLines(mark)
		var statuses []string
		for _, r := range lines["alice"] {
			statuses = append(statuses, r.str("status"))
		}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []string{"rejected", "success", "success"}) || len(lines["bob"]) != 1 {
			t.Errorf("call log lines: alice %v, bob %d; want alice [rejected success success], bob 1", statuses, len(lines["bob"]))
		}
		after := s.metrics(t)
		if d := after[`pyrun_calls_total{status="rejected"}`] - before[`pyrun_calls_total{status="rejected"}`]; d != 1 {
			t.Errorf("pyrun_calls_total{status=\"rejected\"} went up by %v, want 1", d)
		}
	})

	t.Run("TokenRotation", func(t *testing.T) {
		// alice moves to a new token: the file is saved without a restart.
		old, b := s.mustDial(t, "mcp", aliceToken)
		mark := s.log.mark()
		saveTokens(t, tokens, "alice:"+aliceNext+"\nbob:"+bobToken+"\n")
		s.log.waitMsg(t, mark, "access tokens reloaded")
		if _, _, err := s.dial(t, "mcp", aliceToken); err == nil {
			t.Error("alice's old token still opens sessions")
		}
		hdr := map[string]string{"Mcp-Session-Id": old.session.ID(), "Mcp-Protocol-Version": "2025-06-18"}
		if code, _ := post(t, s.base+"/mcp", aliceToken, callBody, hdr); code != http.StatusUnauthorized {
			t.Errorf("alice's old token in her open session: %d, want 401", code)
		}
		wantValue(t, s.session(t, "sse", aliceNext).run(t, "'new'"), `"new"`)
		// Her open session is hers under the new token too.
		b.setToken(aliceNext)
		wantValue(t, old.run(t, "'same session'"), `"same session"`)
		// A file that does not check is rejected; the tokens in force stay.
		mark = s.log.mark()
		saveTokens(t, tokens, "alice:short\n")
		if r := s.log.waitMsg(t, mark, "token file rejected; the tokens in force stay"); r.str("@level") != "error" {
			t.Errorf("rejection logged as %v", r)
		}
		wantValue(t, s.session(t, "mcp", bobToken).run(t, "'kept'"), `"kept"`)
	})

	// No token ever reaches the log.
	for _, line := range strings.Split(s.log.tail(1<<20), "\n") {
		for _, secret := range secrets {
			if strings.Contains(line, secret) {
				t.Errorf("a token in the log: %s", line)
			}
		}
	}
}

// session opens an MCP session with a good token.
func (s *httpServer) session(t *testing.T, transport, token string) *server {
	t.Helper()
	c, _ := s.mustDial(t, transport, token)
	return c
}

func TestServeJWT(t *testing.T) {
	idp := accesstest.NewIDP(t)
	s := startServe(t, "--workers", "1", "--auth-issuer", idp.Issuer(), "--auth-jwks-url", idp.JWKSURL())
	s.waitHealth(t, "a ready worker", func(h health) bool { return h.WorkersIdle == 1 })
	aud := s.base + "/mcp"

	t.Run("Metadata", func(t *testing.T) {
		for _, endpoint := range []string{"/mcp", "/sse"} {
			code, challenge := post(t, s.base+endpoint, "", initializeBody, nil)
			want := `Bearer resource_metadata="` + s.base + "/.well-known/oauth-protected-resource" + endpoint + `"`
			if code != http.StatusUnauthorized || challenge != want {
				t.Errorf("POST %s without a token: %d, %q; want 401, %q", endpoint, code, challenge, want)
			}
			// The document a client finds there, checked as the go-sdk's
			// client checks it (RFC 9728 §3.3: its resource is the endpoint).
			prm, err := oauthex.GetProtectedResourceMetadata(t.Context(), s.base+"/.well-known/oauth-protected-resource"+endpoint, s.base+endpoint, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(prm.AuthorizationServers, []string{idp.Issuer()}) || !slices.Contains(prm.BearerMethodsSupported, "header") {
				t.Errorf("metadata for %s: %+v", endpoint, prm)
			}
		}
		if _, err := oauthex.GetProtectedResourceMetadata(t.Context(), s.base+"/.well-known/oauth-protected-resource", s.base, nil); err != nil {
			t.Error(err)
		}
	})

	t.Run("Tokens", func(t *testing.T) {
		stranger := accesstest.NewKey(t, idp.Key().ID, jose.RS256)
		unpublished := accesstest.NewKey(t, "key-unpublished", jose.ES256)
		for _, tc := range []struct {
			name  string
			token string
		}{
			{"expired", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, Expiry: time.Now().Add(-10 * time.Minute)})},
			{"wrong audience", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: "https://elsewhere.example/mcp"})},
			{"wrong issuer", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, Issuer: "https://evil.example"})},
			{"bad signature", idp.TokenWith(t, stranger, accesstest.Claims{Subject: "alice", Audience: aud})},
			{"unknown kid", idp.TokenWith(t, unpublished, accesstest.Claims{Subject: "alice", Audience: aud})},
		} {
			if code, _ := post(t, s.base+"/mcp", tc.token, initializeBody, nil); code != http.StatusUnauthorized {
				t.Errorf("%s: %d, want 401", tc.name, code)
			}
			for _, transport := range []string{"mcp", "sse"} {
				if _, _, err := s.dial(t, transport, tc.token); err == nil {
					t.Errorf("%s: connected over %s", tc.name, transport)
				}
			}
		}

		mark := s.log.mark()
		alice := idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud})
		viaMCP, _ := s.mustDial(t, "mcp", alice)
		viaSSE, _ := s.mustDial(t, "sse", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: s.base + "/sse"}))
		wantValue(t, viaMCP.run(t, "'jwt'"), `"jwt"`)
		wantValue(t, viaSSE.run(t, "'jwt'"), `"jwt"`)
		s.waitCalls(t, mark, 2)
		if lines := s.callLines(mark); len(lines["jwt:alice"]) != 2 {
			t.Errorf("call log lines by client: %v; want two of jwt:alice", lines)
		}
		// Another subject's token does not open alice's session.
		bob := idp.Token(t, accesstest.Claims{Subject: "bob", Audience: aud})
		hdr := map[string]string{"Mcp-Session-Id": viaMCP.session.ID(), "Mcp-Protocol-Version": "2025-06-18"}
		if code, _ := post(t, s.base+"/mcp", bob, callBody, hdr); code != http.StatusForbidden {
			t.Errorf("bob's JWT in alice's session: %d, want 403", code)
		}
		// A fresh token of alice's does.
		if code, _ := post(t, s.base+"/mcp", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud}),
			`{"jsonrpc":"2.0","id":8,"method":"ping"}`, hdr); code != http.StatusOK {
			t.Errorf("alice's next JWT in her session: %d, want 200", code)
		}
	})
}

// Without access control pyrun listens only on loopback, and says how to
// configure access; --insecure-no-auth overrides that, loudly; credentials
// lift the restriction.
func TestServeListenNeedsAuth(t *testing.T) {
	needBinary(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		_, stderr, code := pyrunCmd(t, "", "serve", "--listen", addr)
		for _, want := range []string{"loopback", "--auth-token-file", "--auth-issuer", "--insecure-no-auth"} {
			if code == 0 || !strings.Contains(stderr, want) {
				t.Errorf("serve --listen %s: exit %d, stderr %q; want a refusal naming %s", addr, code, stderr, want)
			}
		}
	}
	// Past the check, serve provisions the runtime; with an empty runtime
	// folder and no npm on PATH that fails at once, before anything is
	// served, which shows how far it got.
	tokens := filepath.Join(t.TempDir(), "tokens")
	saveTokens(t, tokens, "alice:alice-0123456789abcdefgh\n")
	serve := func(args ...string) string {
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		argv := append([]string{"serve", "--runtime-dir", t.TempDir()}, args...)
		cmd := exec.CommandContext(ctx, pyrunBin, argv...)
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("serve %s: %v, want a failure", strings.Join(args, " "), err)
		}
		return string(out)
	}
	out := serve("--listen", "0.0.0.0:0", "--insecure-no-auth")
	if !strings.Contains(out, "INSECURE") || !strings.Contains(out, "npm") || strings.Contains(out, "refusing") {
		t.Errorf("--insecure-no-auth: want a loud warning, then the runtime's failure:\n%s", out)
	}
	out = serve("--listen", "0.0.0.0:0", "--auth-token-file", tokens)
	if !strings.Contains(out, "npm") || strings.Contains(out, "refusing") || strings.Contains(out, "INSECURE") {
		t.Errorf("with a token file: want no refusal, then the runtime's failure:\n%s", out)
	}
	out = serve("--listen", "0.0.0.0:0", "--auth-issuer", "https://idp.example")
	if !strings.Contains(out, "public-url") {
		t.Errorf("an issuer beyond loopback without public-url: want an error naming public-url:\n%s", out)
	}
	out = serve("--listen", "127.0.0.1:0", "--auth-token-file", filepath.Join(t.TempDir(), "missing"))
	if !strings.Contains(out, "token file") {
		t.Errorf("a missing token file: want an error naming it:\n%s", out)
	}
}

// getMetrics is GET base/metrics's status and body, with token as a
// bearer token ("": none).
func getMetrics(t *testing.T, base, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestServeMetricsOpen: with --metrics-auth=false, /metrics answers without
// a token while /mcp still needs one.
func TestServeMetricsOpen(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	saveTokens(t, tokens, "alice:alice-7Xv0rB9kGm1VtZcLwQ8s\n")
	s := startServe(t, "--workers", "1", "--auth-token-file", tokens, "--metrics-auth=false")
	if code, body := getMetrics(t, s.base, ""); code != http.StatusOK || !strings.Contains(body, "pyrun_build_info") {
		t.Errorf("GET /metrics without a token: %d, want 200 and the metrics", code)
	}
	if code, _ := post(t, s.base+"/mcp", "", initializeBody, nil); code != http.StatusUnauthorized {
		t.Errorf("POST /mcp without a token: %d, want 401", code)
	}
}

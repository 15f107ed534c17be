package access_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/mcp/access"
	"github.com/pyrun/pyrun/mcp/access/accesstest"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tokenGuard(t *testing.T, body string) (*access.Guard, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, body)
	g, err := access.New(access.Config{TokenFile: path}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return g, path
}

func verify(g *access.Guard, token string) (*auth.TokenInfo, error) {
	return g.Verify(context.Background(), token, httptest.NewRequest("POST", "/mcp", nil))
}

func TestTokenFile(t *testing.T) {
	g, _ := tokenGuard(t, `
# pyrun's clients
alice:alice-0123456789abcdef
  bob:bob-0123456789abcdef:with:colons

alice:alice-second-token-000000
anonymous-token-0123456789
`)
	for token, want := range map[string]string{
		"alice-0123456789abcdef":           "alice",
		"alice-second-token-000000":        "alice",
		"bob-0123456789abcdef:with:colons": "bob",
		// A token alone gets a name derived from its hash: "token-" and
		// the first 8 hex digits of sha256("anonymous-token-0123456789").
		"anonymous-token-0123456789": "token-802eb224",
	} {
		info, err := verify(g, token)
		if err != nil || info.UserID != want {
			t.Errorf("token %q: %v, %v; want client %q", token, info, err, want)
		}
		if err == nil && !info.Expiration.IsZero() {
			t.Errorf("token %q has an expiration: %v", token, info.Expiration)
		}
	}
	for _, token := range []string{"", "alice", "alice-0123456789abcde", "alice-0123456789abcdef ", "alice:alice-0123456789abcdef"} {
		if info, err := verify(g, token); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("token %q: %v, %v; want ErrInvalidToken", token, info, err)
		}
	}
}

func TestTokenFileErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"alice:short", "line 1: the token is shorter than 16"},
		{"# x\nal ice:0123456789abcdef0", "line 2: a name is"},
		{":0123456789abcdef0", "line 1: a name is"},
		{"alice:0123456789abcdef0\nbob:0123456789abcdef0", "line 2: the same token as line 1"},
		{"alice:0123456789abc\tdef0", "printable ASCII"},
	} {
		path := filepath.Join(t.TempDir(), "tokens")
		writeFile(t, path, tc.body)
		_, err := access.New(access.Config{TokenFile: path}, testlog.New(t))
		if !errors.Is(err, access.ErrTokenFile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token file %q: %v, want an error saying %q", tc.body, err, tc.want)
		}
	}
	if _, err := access.New(access.Config{TokenFile: filepath.Join(t.TempDir(), "missing")}, testlog.New(t)); err == nil {
		t.Error("a missing token file was accepted")
	}
}

// A reload puts the new file in force at once; a bad file is rejected and
// the tokens in force stay.
func TestTokenFileReload(t *testing.T) {
	g, path := tokenGuard(t, "alice:old-token-0123456789\n")
	writeFile(t, path, "alice:new-token-0123456789\nbob:bob-token-0123456789\n")
	if err := g.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(g, "old-token-0123456789"); err == nil {
		t.Error("the replaced token still works")
	}
	for _, tok := range []string{"new-token-0123456789", "bob-token-0123456789"} {
		if _, err := verify(g, tok); err != nil {
			t.Errorf("%s: %v", tok, err)
		}
	}
	writeFile(t, path, "bob:short\n")
	if err := g.ReloadTokens(); err == nil {
		t.Error("a bad token file was accepted")
	}
	if _, err := verify(g, "bob-token-0123456789"); err != nil {
		t.Errorf("after a rejected reload: %v, want the tokens in force kept", err)
	}
	writeFile(t, path, "# nobody\n")
	if err := g.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(g, "bob-token-0123456789"); err == nil {
		t.Error("an emptied token file still lets bob in")
	}
}

func jwtGuard(t *testing.T, idp *accesstest.IDP, cfg access.Config) *access.Guard {
	t.Helper()
	cfg.Issuer = idp.Issuer()
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://127.0.0.1:3001"
	}
	g, err := access.New(cfg, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestJWT(t *testing.T) {
	idp := accesstest.NewIDP(t)
	g := jwtGuard(t, idp, access.Config{JWKSURL: idp.JWKSURL()})
	const aud = "http://127.0.0.1:3001/mcp"
	stranger := accesstest.NewKey(t, "key-1", jose.RS256) // the published kid, another key
	unpublished := accesstest.NewKey(t, "key-9", jose.RS256)
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + // {"alg":"none","typ":"JWT"}
		"eyJpc3MiOiJ4Iiwic3ViIjoiYWxpY2UifQ." // {"iss":"x","sub":"alice"}
	for _, tc := range []struct {
		name  string
		token string
		want  string // error text; "" for accepted
	}{
		{"valid", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud}), ""},
		{"valid for /sse", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: "http://127.0.0.1:3001/sse"}), ""},
		{"valid for the origin", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: "http://127.0.0.1:3001"}), ""},
		{"within the leeway", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, Expiry: time.Now().Add(-access.Leeway / 2)}), ""},
		{"expired", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, Expiry: time.Now().Add(-5 * time.Minute)}), "expired"},
		{"wrong audience", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: "https://other.example/mcp"}), "audience"},
		{"no audience", idp.Token(t, accesstest.Claims{Subject: "alice"}), "audience"},
		{"wrong issuer", idp.Token(t, accesstest.Claims{Issuer: "https://evil.example", Subject: "alice", Audience: aud}), "issuer"},
		{"bad signature", idp.TokenWith(t, stranger, accesstest.Claims{Subject: "alice", Audience: aud}), "bad signature"},
		{"unknown kid", idp.TokenWith(t, unpublished, accesstest.Claims{Subject: "alice", Audience: aud}), `unknown signing key "key-9"`},
		{"no expiry", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, NoExpiry: true}), "no expiry"},
		{"no subject", idp.Token(t, accesstest.Claims{Audience: aud}), "no subject"},
		{"issued in the future", idp.Token(t, accesstest.Claims{Subject: "alice", Audience: aud, IssuedAt: time.Now().Add(time.Hour)}), "future"},
		{"alg none", none, "accepted algorithm"},
		{"garbage", "a.b.c", "accepted algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := verify(g, tc.token)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if info.UserID != "jwt:alice" || info.Expiration.IsZero() {
					t.Errorf("token info %+v, want client jwt:alice with an expiration", info)
				}
				return
			}
			if !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want ErrInvalidToken saying %q", info, err, tc.want)
			}
		})
	}
	// An HMAC token signed with the public key as the secret (the classic
	// algorithm confusion) is refused before any key is looked at.
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := jwt.Signed(signer).Claims(jwt.Claims{Issuer: idp.Issuer(), Subject: "alice", Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if _, err := verify(g, hs); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("HS256 token: %v, want refused", err)
	}
}

// The keys are fetched once, again when a token names a key the set does
// not hold (a rotation), and not more often than the refresh bound
// however many such tokens come.
func TestJWKSRefresh(t *testing.T) {
	idp := accesstest.NewIDP(t)
	g := jwtGuard(t, idp, access.Config{JWKSURL: idp.JWKSURL()})
	g.SetMinRefresh(time.Hour)
	if err := g.Prefetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := idp.Key()
	const aud = "http://127.0.0.1:3001/mcp"
	claims := accesstest.Claims{Subject: "alice", Audience: aud}
	if _, err := verify(g, idp.Token(t, claims)); err != nil {
		t.Fatal(err)
	}
	next := accesstest.NewKey(t, "key-2", jose.ES256)
	idp.Publish(old, next)

	// Within the bound: an unknown key is refused without a fetch, from
	// many requests at once.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := verify(g, idp.TokenWith(t, next, claims)); !errors.Is(err, auth.ErrInvalidToken) {
				t.Errorf("a token by a key published after the last fetch, within the refresh bound: %v", err)
			}
		})
	}
	wg.Wait()
	if n := idp.Fetches(); n != 1 {
		t.Errorf("%d fetches of the JWKS, want 1", n)
	}
	// Past the bound: the new key is fetched, once, by concurrent requests.
	g.SetMinRefresh(0)
	for range 20 {
		wg.Go(func() {
			if _, err := verify(g, idp.TokenWith(t, next, claims)); err != nil {
				t.Errorf("a token by the new key: %v", err)
			}
		})
	}
	wg.Wait()
	if n := idp.Fetches(); n != 2 {
		t.Errorf("%d fetches of the JWKS after the rotation, want 2", n)
	}
	if _, err := verify(g, idp.Token(t, claims)); err != nil {
		t.Errorf("the old key, still published: %v", err)
	}
}

// Without a JWKS URL, the keys are found through the issuer's metadata.
func TestJWKSDiscovery(t *testing.T) {
	idp := accesstest.NewIDP(t)
	g := jwtGuard(t, idp, access.Config{})
	if _, err := verify(g, idp.Token(t, accesstest.Claims{Subject: "bob", Audience: "http://127.0.0.1:3001/mcp"})); err != nil {
		t.Fatal(err)
	}
}

// A key set that cannot be fetched is pyrun's problem, not the client's:
// no ErrInvalidToken (which would be 401), so the middleware answers 500.
func TestJWKSUnreachable(t *testing.T) {
	idp := accesstest.NewIDP(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	g := jwtGuard(t, idp, access.Config{JWKSURL: dead.URL + "/jwks"})
	if err := g.Prefetch(t.Context()); err == nil {
		t.Error("Prefetch from a closed port succeeded")
	}
	_, err := verify(g, idp.Token(t, accesstest.Claims{Subject: "bob", Audience: "http://127.0.0.1:3001/mcp"}))
	if err == nil || errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("with no keys: %v, want an error that is not ErrInvalidToken", err)
	}
}

func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		cfg  access.Config
		want string
	}{
		{access.Config{}, "neither"},
		{access.Config{Issuer: "http://idp.example"}, "must use https"},
		{access.Config{Issuer: "https://idp.example"}, "public URL"},
		{access.Config{Issuer: "https://idp.example", PublicURL: "http://pyrun.example"}, "must use https"},
		{access.Config{Issuer: "https://idp.example", PublicURL: "https://pyrun.example", JWKSURL: "http://idp.example/jwks"}, "must use https"},
		{access.Config{Issuer: "https://idp.example", PublicURL: "https://pyrun.example/?x"}, "query"},
	} {
		if _, err := access.New(tc.cfg, testlog.New(t)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// Protect answers 401 with a challenge; with JWTs the challenge names the
// endpoint's protected resource metadata, which the go-sdk's client-side
// discovery accepts.
func TestProtectAndMetadata(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := auth.TokenInfoFromContext(r.Context())
		w.Header().Set("X-Client", info.UserID)
	})
	t.Run("tokens", func(t *testing.T) {
		g, _ := tokenGuard(t, "alice:alice-0123456789abcdef\n")
		h := g.Protect(ok)
		for _, tc := range []struct{ header, challenge, client string }{
			{"", `Bearer realm="pyrun"`, ""},
			{"Bearer wrong-0123456789abcdef", `Bearer realm="pyrun"`, ""},
			{"Basic YWxpY2U6eA==", `Bearer realm="pyrun"`, ""},
			{"Bearer alice-0123456789abcdef", "", "alice"},
		} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/mcp", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			h.ServeHTTP(rec, req)
			wantCode := http.StatusUnauthorized
			if tc.client != "" {
				wantCode = http.StatusOK
			}
			if rec.Code != wantCode || rec.Header().Get("WWW-Authenticate") != tc.challenge || rec.Header().Get("X-Client") != tc.client {
				t.Errorf("Authorization %q: %d, WWW-Authenticate %q, client %q; want %d, %q, %q", tc.header,
					rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Header().Get("X-Client"), wantCode, tc.challenge, tc.client)
			}
		}
		if len(g.MetadataHandlers()) != 0 {
			t.Error("metadata without an authorization server")
		}
	})

	t.Run("jwt", func(t *testing.T) {
		idp := accesstest.NewIDP(t)
		// pyrun at its public URL: a server that serves the guard's
		// metadata and protects /mcp and /sse.
		mux := http.NewServeMux()
		srv := httptest.NewServer(mux)
		defer srv.Close()
		g := jwtGuard(t, idp, access.Config{PublicURL: srv.URL, JWKSURL: idp.JWKSURL()})
		for pattern, h := range g.MetadataHandlers() {
			mux.Handle(pattern, h)
		}
		mux.Handle("/mcp", g.Protect(ok))
		mux.Handle("/sse", g.Protect(ok))

		for _, endpoint := range []string{"/mcp", "/sse"} {
			resp, err := http.Post(srv.URL+endpoint, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := `Bearer resource_metadata="` + srv.URL + "/.well-known/oauth-protected-resource" + endpoint + `"`
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
				t.Errorf("POST %s: %s, WWW-Authenticate %q; want 401, %q", endpoint, resp.Status, resp.Header.Get("WWW-Authenticate"), want)
			}
			challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
			if err != nil || len(challenges) != 1 {
				t.Fatalf("challenges %v: %v", challenges, err)
			}
			// As an MCP client does: the document at resource_metadata must
			// name the endpoint as its resource and the issuer.
			prm, err := oauthex.GetProtectedResourceMetadata(t.Context(), challenges[0].Params["resource_metadata"], srv.URL+endpoint, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != idp.Issuer() {
				t.Errorf("authorization_servers %q, want [%q]", prm.AuthorizationServers, idp.Issuer())
			}
			req, _ := http.NewRequest("POST", srv.URL+endpoint, nil)
			req.Header.Set("Authorization", "Bearer "+idp.Token(t, accesstest.Claims{Subject: "carol", Audience: srv.URL + endpoint}))
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Client") != "jwt:carol" || resp.Header.Get("WWW-Authenticate") != "" {
				t.Errorf("POST %s with a JWT: %s, client %q, challenge %q", endpoint, resp.Status, resp.Header.Get("X-Client"), resp.Header.Get("WWW-Authenticate"))
			}
		}
		// The origin's document, for clients that look at the root.
		if _, err := oauthex.GetProtectedResourceMetadata(t.Context(), srv.URL+"/.well-known/oauth-protected-resource", srv.URL, nil); err != nil {
			t.Error(err)
		}
	})

	t.Run("behind a prefix", func(t *testing.T) {
		idp := accesstest.NewIDP(t)
		g := jwtGuard(t, idp, access.Config{PublicURL: "https://example.com/pyrun/", JWKSURL: idp.JWKSURL()})
		var paths []string
		for p := range g.MetadataHandlers() {
			paths = append(paths, p)
		}
		if len(paths) != 2 || !containsAll(paths, "/.well-known/oauth-protected-resource/pyrun/mcp", "/.well-known/oauth-protected-resource/pyrun/sse") {
			t.Errorf("metadata paths %q", paths)
		}
		rec := httptest.NewRecorder()
		g.Protect(ok).ServeHTTP(rec, httptest.NewRequest("GET", "/sse", nil))
		if want := `Bearer resource_metadata="https://example.com/.well-known/oauth-protected-resource/pyrun/sse"`; rec.Header().Get("WWW-Authenticate") != want {
			t.Errorf("WWW-Authenticate %q, want %q", rec.Header().Get("WWW-Authenticate"), want)
		}
	})
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, x := range list {
			found = found || x == w
		}
		if !found {
			return false
		}
	}
	return true
}

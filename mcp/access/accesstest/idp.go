// Package accesstest is a stand-in identity provider for tests of pyrun's
// access control: it serves OAuth authorization server metadata and a JWKS
// on a loopback port, and signs access tokens with keys it generates.
//
//	idp := accesstest.NewIDP(t)            // one RSA key, "key-1"
//	tok := idp.Token(t, accesstest.Claims{Subject: "alice", Audience: "http://127.0.0.1:3001/mcp"})
//	// pyrun serve --auth-issuer idp.Issuer() --auth-jwks-url idp.JWKSURL()
package accesstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Key is a signing key of the IDP.
type Key struct {
	ID      string
	Alg     jose.SignatureAlgorithm
	Private crypto.Signer
}

// NewKey generates a key: RS256 on RSA 2048, or ES256 on P-256.
func NewKey(t testing.TB, id string, alg jose.SignatureAlgorithm) Key {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("accesstest: no key generation for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: id, Alg: alg, Private: priv}
}

// IDP is the identity provider. Its methods are safe for concurrent use.
type IDP struct {
	srv *httptest.Server

	mu        sync.Mutex
	published []Key // in the JWKS
	fetches   int   // JWKS requests
}

// NewIDP starts an IDP publishing one RS256 key, "key-1"; it stops with the test.
func NewIDP(t testing.TB) *IDP {
	p := &IDP{published: []Key{NewKey(t, "key-1", jose.RS256)}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                           p.Issuer(),
			"authorization_endpoint":           p.Issuer() + "/authorize",
			"token_endpoint":                   p.Issuer() + "/token",
			"jwks_uri":                         p.JWKSURL(),
			"response_types_supported":         []string{"code"},
			"code_challenge_methods_supported": []string{"S256"},
		})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// Issuer is the IDP's issuer identifier, its base URL.
func (p *IDP) Issuer() string { return p.srv.URL }

// JWKSURL is where it publishes its keys.
func (p *IDP) JWKSURL() string { return p.srv.URL + "/jwks" }

// Key returns the first published key.
func (p *IDP) Key() Key {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[0]
}

// Publish replaces the published keys (a key rotation).
func (p *IDP) Publish(keys ...Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = keys
}

// Fetches is how many times the JWKS was fetched.
func (p *IDP) Fetches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetches
}

func (p *IDP) jwks(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	p.fetches++
	var set jose.JSONWebKeySet
	for _, k := range p.published {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Private.Public(), KeyID: k.ID, Algorithm: string(k.Alg), Use: "sig"})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// Claims are a token's claims. Zero fields get defaults: Issuer the IDP's,
// Expiry an hour from now, IssuedAt now; Subject and Audience stay empty.
type Claims struct {
	Issuer   string
	Subject  string
	Audience string
	Expiry   time.Time
	NoExpiry bool
	IssuedAt time.Time
}

// Token signs claims with the first published key.
func (p *IDP) Token(t testing.TB, c Claims) string {
	return p.TokenWith(t, p.Key(), c)
}

// TokenWith signs claims with key, published or not, naming key.ID as kid
// (no kid when it is empty).
func (p *IDP) TokenWith(t testing.TB, key Key, c Claims) string {
	t.Helper()
	now := time.Now()
	if c.Issuer == "" {
		c.Issuer = p.Issuer()
	}
	if c.Expiry.IsZero() {
		c.Expiry = now.Add(time.Hour)
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = now
	}
	claims := jwt.Claims{
		Issuer:   c.Issuer,
		Subject:  c.Subject,
		IssuedAt: jwt.NewNumericDate(c.IssuedAt),
	}
	if c.Audience != "" {
		claims.Audience = jwt.Audience{c.Audience}
	}
	if !c.NoExpiry {
		claims.Expiry = jwt.NewNumericDate(c.Expiry)
	}
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if key.ID != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), key.ID)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: key.Alg, Key: key.Private}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Package access decides who may use pyrun serve's MCP endpoints. A client
// proves who it is with a bearer token: one listed in a token file (see
// tokens.go for the format; the file is re-read on Reload), or a JWT access
// token from an OAuth authorization server, checked against the server's
// published keys as the MCP authorization spec describes. The Guard serves
// the OAuth protected resource metadata (RFC 9728) that points clients at
// that server.
//
//	g, err := access.New(access.Config{TokenFile: "/etc/pyrun/tokens"}, log)
//	mux.Handle("/mcp", g.Protect(mcpHandler)) // 401 without a valid token
//	for pattern, h := range g.MetadataHandlers() { mux.Handle(pattern, h) }
//
// The go-sdk's auth package does the HTTP side (RequireBearerToken): an
// authenticated request's context carries an auth.TokenInfo whose UserID is
// the client's identity: a token's name, or "jwt:" and a JWT's subject.
package access

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Config says which credentials are accepted. It is copied, never written
// back. The zero value of each field means what its comment says.
type Config struct {
	// TokenFile lists bearer tokens, one client a line. "": none.
	TokenFile string
	// Issuer is the OAuth authorization server whose JWT access tokens are
	// accepted: a token's iss must be exactly this. "": no JWTs.
	Issuer string
	// Audiences are the values a JWT's aud must hold one of. nil: the
	// resource URLs (PublicURL with /mcp, with /sse, and alone).
	Audiences []string
	// JWKSURL is where the issuer publishes its signing keys. "": the
	// jwks_uri of the issuer's metadata (RFC 8414 or OpenID discovery).
	JWKSURL string
	// PublicURL is the URL clients reach pyrun at, a path prefix included
	// (https://pyrun.example.com, https://example.com/pyrun). It names the
	// protected resources in the metadata. Required with Issuer.
	PublicURL string
	// HTTPClient fetches the issuer's metadata and keys. nil: a client
	// with a 10s timeout.
	HTTPClient *http.Client
}

// Configured says whether c accepts any credentials: without, there is no
// Guard (New refuses).
func (c Config) Configured() bool { return c.TokenFile != "" || c.Issuer != "" }

// Validate checks the settings a user set, naming each as pyrun serve's
// flags and config keys do; New checks the rest when it reads them.
func (c Config) Validate() error {
	if c.Issuer == "" && (c.JWKSURL != "" || len(c.Audiences) > 0) {
		return errors.New("auth-jwks-url and auth-audience need auth-issuer: the authorization server whose tokens to accept")
	}
	return nil
}

// Guard checks bearer tokens. Its methods are safe for concurrent use.
type Guard struct {
	log    hclog.Logger
	tokens *tokens      // nil: no token file
	jwt    *jwtVerifier // nil: no JWTs
	issuer string
	public *url.URL // nil without JWTs
}

// New prepares a Guard from cfg: it reads the token file and checks the
// URLs; it fetches nothing (see Prefetch). log may be nil.
func New(cfg Config, log hclog.Logger) (*Guard, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	g := &Guard{log: log, issuer: cfg.Issuer}
	if !cfg.Configured() {
		return nil, errors.New("access: neither a token file nor an issuer")
	}
	if cfg.TokenFile != "" {
		g.tokens = &tokens{path: cfg.TokenFile}
		names, open, err := g.tokens.load()
		if err != nil {
			return nil, err
		}
		log.Info("access tokens loaded", "file", cfg.TokenFile, "clients", names)
		g.warn(names, open)
	}
	if cfg.Issuer == "" {
		return g, nil
	}
	if err := checkURL("issuer", cfg.Issuer); err != nil {
		return nil, err
	}
	if cfg.PublicURL == "" {
		return nil, errors.New("access: JWTs need the public URL that clients reach pyrun at")
	}
	if err := checkURL("public URL", cfg.PublicURL); err != nil {
		return nil, err
	}
	pub, _ := url.Parse(strings.TrimSuffix(cfg.PublicURL, "/"))
	if pub.RawQuery != "" || pub.Fragment != "" {
		return nil, fmt.Errorf("public URL %q: no query or fragment, please", cfg.PublicURL)
	}
	g.public = pub
	if cfg.JWKSURL != "" {
		if err := checkURL("JWKS URL", cfg.JWKSURL); err != nil {
			return nil, err
		}
	}
	aud := cfg.Audiences
	if len(aud) == 0 {
		aud = []string{g.resource("mcp"), g.resource("sse"), g.resource("")}
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: fetchTimeout}
	}
	g.jwt = &jwtVerifier{
		issuer:    cfg.Issuer,
		audiences: jwt.Audience(aud),
		keys: &keySet{
			url: cfg.JWKSURL, issuer: cfg.Issuer, client: client, log: log,
			minRefresh: defaultMinRefresh, maxAge: defaultMaxAge,
		},
	}
	return g, nil
}

// ReloadTokens re-reads the token file. A file that cannot be read or
// parsed is rejected with a logged error, and the tokens in force stay.
// Without a token file (or a Guard) it does nothing.
func (g *Guard) ReloadTokens() error {
	if g == nil || g.tokens == nil {
		return nil
	}
	names, open, err := g.tokens.load()
	if err != nil {
		g.log.Error("token file rejected; the tokens in force stay", "error", err)
		return err
	}
	g.log.Info("access tokens reloaded", "file", g.tokens.path, "clients", names)
	g.warn(names, open)
	return nil
}

func (g *Guard) warn(names []string, open bool) {
	if open {
		g.log.Warn("other users may read or change the token file: chmod 600 it", "file", g.tokens.path)
	}
	if len(names) == 0 {
		g.log.Warn("the token file holds no tokens: no client gets in with a token", "file", g.tokens.path)
	}
}

// TokenFile is the token file's path; "" without one (or without a Guard).
func (g *Guard) TokenFile() string {
	if g == nil || g.tokens == nil {
		return ""
	}
	return g.tokens.path
}

// Prefetch fetches the issuer's signing keys, so that a configuration
// mistake shows at start; without JWTs it does nothing. Keys are fetched
// again when needed whatever it returns.
func (g *Guard) Prefetch(ctx context.Context) error {
	if g.jwt == nil {
		return nil
	}
	return g.jwt.keys.prefetch(ctx)
}

// Verify is the auth.TokenVerifier: a listed token, or a valid JWT.
func (g *Guard) Verify(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	if g.tokens != nil {
		if name, ok := g.tokens.match(token); ok {
			return &auth.TokenInfo{UserID: name}, nil
		}
	}
	err := fmt.Errorf("%w: unknown token", auth.ErrInvalidToken)
	if g.jwt != nil && strings.Count(token, ".") == 2 {
		info, jerr := g.jwt.verify(ctx, token)
		if jerr == nil {
			return info, nil
		}
		err = jerr
	}
	level := hclog.Info
	if !errors.Is(err, auth.ErrInvalidToken) {
		level = hclog.Warn
	}
	// Never the token: only why it was refused.
	g.log.Log(level, "access denied", "reason", err.Error(), "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	return nil, err
}

// Protect lets through only requests that carry a valid bearer token. The
// others get 401 with a WWW-Authenticate challenge: with JWTs it names the
// endpoint's protected resource metadata (resource_metadata="..."), as the
// MCP authorization spec asks; with tokens alone, a plain Bearer realm.
func (g *Guard) Protect(next http.Handler) http.Handler {
	wrap := func(endpoint string) http.Handler {
		opts := &auth.RequireBearerTokenOptions{
			AllowMissingExpiration: true, // listed tokens have none; the JWT check demands one
			ClockSkew:              Leeway,
		}
		if g.jwt != nil {
			opts.ResourceMetadataURL = g.metadataURL(endpoint)
		}
		return auth.RequireBearerToken(g.Verify, opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if g.jwt == nil {
				w.Header().Del("WWW-Authenticate") // let in: no challenge
			}
			next.ServeHTTP(w, r)
		}))
	}
	viaMCP, viaSSE := wrap("mcp"), wrap("sse")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.jwt == nil {
			// The SDK writes a challenge only when it names metadata or
			// scopes; a 401 must carry one (RFC 9110). Protected requests
			// that get in remove it.
			w.Header().Set("WWW-Authenticate", `Bearer realm="pyrun"`)
		}
		if path.Base(r.URL.Path) == "sse" {
			viaSSE.ServeHTTP(w, r)
		} else {
			viaMCP.ServeHTTP(w, r)
		}
	})
}

// wellKnown is the root of protected resource metadata paths (RFC 9728 §3).
const wellKnown = "/.well-known/oauth-protected-resource"

// resource is the resource URL of an endpoint ("mcp", "sse"), or of pyrun
// as a whole for "".
func (g *Guard) resource(endpoint string) string {
	u := *g.public
	if endpoint != "" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + endpoint
	}
	return u.String()
}

// metadataPath is where an endpoint's metadata is, on pyrun's origin:
// the well-known prefix inserted before the resource's path.
func (g *Guard) metadataPath(endpoint string) string {
	p := strings.TrimSuffix(g.public.Path, "/")
	if endpoint != "" {
		p += "/" + endpoint
	}
	return wellKnown + p
}

func (g *Guard) metadataURL(endpoint string) string {
	u := *g.public
	u.Path, u.RawPath = g.metadataPath(endpoint), ""
	return u.String()
}

// MetadataHandlers are the protected resource metadata documents (RFC 9728)
// by the path they are served at: one for /mcp, one for /sse, and, when
// pyrun is at the root of its origin, one for the origin. Each names the
// issuer as the authorization server. Empty without JWTs (or a Guard).
func (g *Guard) MetadataHandlers() map[string]http.Handler {
	if g == nil || g.jwt == nil {
		return nil
	}
	endpoints := []string{"mcp", "sse"}
	if strings.TrimSuffix(g.public.Path, "/") == "" {
		endpoints = append(endpoints, "")
	}
	out := map[string]http.Handler{}
	for _, e := range endpoints {
		out[g.metadataPath(e)] = auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource:               g.resource(e),
			AuthorizationServers:   []string{g.issuer},
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "pyrun: Python in a sandbox",
		})
	}
	return out
}

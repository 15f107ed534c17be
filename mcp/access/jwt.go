package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// JWT access tokens. A token is accepted when it is a JWS signed with an
// asymmetric algorithm by a key of the authorization server's JWKS, its
// iss is the configured issuer, its aud holds one of the accepted audiences,
// it has a sub and an exp, and exp, nbf and iat hold (within leeway).

// signingAlgs are the algorithms a token may be signed with: asymmetric
// ones only, so that a public key can never be used as a shared secret.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// Leeway is the clock skew allowed on exp, nbf and iat.
const Leeway = 30 * time.Second

// Key set limits: a JWKS document is at most maxJWKS bytes with at most
// maxKeys keys, and a fetch takes at most fetchTimeout.
const (
	maxJWKS      = 1 << 20
	maxKeys      = 100
	fetchTimeout = 10 * time.Second
)

// JWT identities are "jwt:" and the token's sub, apart from token names
// (which have no colon).
const jwtPrefix = "jwt:"

type jwtVerifier struct {
	issuer    string
	audiences jwt.Audience
	keys      *keySet
}

// verify checks raw and returns who it names. Errors that wrap
// auth.ErrInvalidToken are the client's fault (401); others are pyrun's or
// the authorization server's (the keys could not be fetched).
func (v *jwtVerifier) verify(ctx context.Context, raw string) (*auth.TokenInfo, error) {
	tok, err := jwt.ParseSigned(raw, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("%w: not a JWT signed with an accepted algorithm", auth.ErrInvalidToken)
	}
	h := tok.Headers[0]
	key, err := v.keys.get(ctx, h.KeyID, h.Algorithm)
	if err != nil {
		return nil, err
	}
	var claims jwt.Claims
	if err := tok.Claims(key.Key, &claims); err != nil {
		return nil, fmt.Errorf("%w: bad signature", auth.ErrInvalidToken)
	}
	err = claims.ValidateWithLeeway(jwt.Expected{Issuer: v.issuer, AnyAudience: v.audiences}, Leeway)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return nil, fmt.Errorf("%w: issuer %q is not %q", auth.ErrInvalidToken, claims.Issuer, v.issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, fmt.Errorf("%w: audience %q holds none of %q", auth.ErrInvalidToken, []string(claims.Audience), []string(v.audiences))
	case err != nil:
		return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, strings.TrimPrefix(err.Error(), "go-jose/go-jose/jwt: "))
	case claims.Expiry == nil:
		return nil, fmt.Errorf("%w: no expiry (exp)", auth.ErrInvalidToken)
	case claims.Subject == "":
		return nil, fmt.Errorf("%w: no subject (sub)", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: jwtPrefix + claims.Subject, Expiration: claims.Expiry.Time()}, nil
}

// keySet is the authorization server's signing keys (its JWKS), fetched
// on first use and again when a token names a key it does not hold or the
// keys are older than maxAge, at most once every minRefresh: a stream of
// tokens naming unknown keys costs one fetch per minRefresh. Keys that
// could not be refreshed stay in use. Its methods are safe for concurrent
// use.
type keySet struct {
	url        string // "": discovered from the issuer's metadata
	issuer     string
	client     *http.Client
	log        hclog.Logger
	minRefresh time.Duration
	maxAge     time.Duration

	mu       sync.Mutex
	keys     []jose.JSONWebKey
	fetched  time.Time     // of the keys; zero: never fetched
	tried    time.Time     // the last fetch's start
	err      error         // of the last fetch
	fetching chan struct{} // non-nil while a fetch runs; closed when it ends
}

// Key set refresh defaults.
const (
	defaultMinRefresh = 10 * time.Second
	defaultMaxAge     = time.Hour
)

// get returns the key kid (any key when the token names none and the set
// holds exactly one) for alg.
func (k *keySet) get(ctx context.Context, kid, alg string) (*jose.JSONWebKey, error) {
	for attempt := 0; ; attempt++ {
		k.mu.Lock()
		key := k.findLocked(kid, alg)
		if key != nil && time.Since(k.fetched) < k.maxAge {
			k.mu.Unlock()
			return key, nil
		}
		if ch := k.fetching; ch != nil {
			k.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for the signing keys: %w", ctx.Err())
			}
			continue
		}
		if attempt > 0 || (!k.tried.IsZero() && time.Since(k.tried) < k.minRefresh) {
			never, err := k.fetched.IsZero(), k.err
			k.mu.Unlock()
			switch {
			case key != nil:
				return key, nil // old, but the best there is
			case never && err != nil:
				return nil, fmt.Errorf("no signing keys from the authorization server: %w", err)
			case kid == "":
				return nil, fmt.Errorf("%w: the token names no key (kid) and the key set has several", auth.ErrInvalidToken)
			}
			return nil, fmt.Errorf("%w: unknown signing key %q", auth.ErrInvalidToken, kid)
		}
		ch := make(chan struct{})
		k.fetching, k.tried = ch, time.Now()
		k.mu.Unlock()

		// One client's cancelled request must not fail the fetch others wait for.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		keys, err := k.fetch(fctx)
		cancel()

		k.mu.Lock()
		if err == nil {
			k.keys, k.fetched = keys, time.Now()
		}
		k.err = err
		k.fetching = nil
		close(ch)
		k.mu.Unlock()
		if err != nil {
			k.log.Error("fetching the authorization server's signing keys", "error", err)
		}
	}
}

func (k *keySet) findLocked(kid, alg string) *jose.JSONWebKey {
	var found *jose.JSONWebKey
	for i := range k.keys {
		key := &k.keys[i]
		if key.Algorithm != "" && key.Algorithm != alg {
			continue
		}
		if kid != "" && key.KeyID == kid {
			return key
		}
		if kid == "" {
			if found != nil {
				return nil // which one? the token must say
			}
			found = key
		}
	}
	return found
}

// prefetch fetches the keys once, so that a wrong URL shows at start.
func (k *keySet) prefetch(ctx context.Context) error {
	_, err := k.get(ctx, "\x00prefetch", "")
	if errors.Is(err, auth.ErrInvalidToken) {
		return nil // fetched; no such key, of course
	}
	return err
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	if k.url == "" {
		u, err := discoverJWKS(ctx, k.issuer, k.client)
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.url = u
		k.mu.Unlock()
		k.log.Info("found the authorization server's signing keys", "issuer", k.issuer, "jwks_url", u)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", k.url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", k.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s", k.url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", k.url, err)
	}
	if len(b) > maxJWKS {
		return nil, fmt.Errorf("fetch %s: larger than %d bytes", k.url, maxJWKS)
	}
	keys, err := parseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.url, err)
	}
	k.log.Debug("signing keys fetched", "url", k.url, "keys", len(keys))
	return keys, nil
}

// parseJWKS keeps the public signing keys of a JWKS document; keys it cannot
// use (other types, encryption keys, private or symmetric keys) are left out.
func parseJWKS(b []byte) ([]jose.JSONWebKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	if len(doc.Keys) > maxKeys {
		return nil, fmt.Errorf("parse JWKS: %d keys, more than %d", len(doc.Keys), maxKeys)
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(raw); err != nil || !key.Valid() || !key.IsPublic() {
			continue
		}
		if key.Use != "" && key.Use != "sig" {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("parse JWKS: no public signing keys")
	}
	return keys, nil
}

// discoverJWKS finds the issuer's JWKS URL in its metadata: OAuth 2.0
// authorization server metadata (RFC 8414), or OpenID Connect discovery.
func discoverJWKS(ctx context.Context, issuer string, c *http.Client) (string, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return "", fmt.Errorf("issuer %q: %w", issuer, err)
	}
	path := strings.TrimSuffix(u.Path, "/")
	var candidates []string
	for _, p := range []string{
		"/.well-known/oauth-authorization-server" + path,
		"/.well-known/openid-configuration" + path,
		path + "/.well-known/openid-configuration",
	} {
		c := *u
		c.Path, c.RawPath = p, ""
		candidates = append(candidates, c.String())
	}
	var errs []error
	for _, m := range candidates {
		asm, err := oauthex.GetAuthServerMeta(ctx, m, issuer, c)
		switch {
		case err != nil:
			errs = append(errs, err)
		case asm != nil && asm.JWKSURI != "":
			if err := checkURL("jwks_uri", asm.JWKSURI); err != nil {
				return "", err
			}
			return asm.JWKSURI, nil
		}
	}
	return "", fmt.Errorf("no jwks_uri in the metadata of issuer %s (tried %s): %w",
		issuer, strings.Join(candidates, ", "), errors.Join(errs...))
}

// checkURL accepts https URLs, and http ones for loopback hosts.
func checkURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, s, err)
	}
	switch {
	case u.Host == "":
		return fmt.Errorf("%s %q is not an absolute URL", what, s)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%s %q must use https (http only for loopback addresses)", what, s)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

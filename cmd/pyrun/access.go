package main

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/mcp/access"
)

// Access control of pyrun serve: who may run code. Without credentials
// configured pyrun listens only on loopback; with them, every MCP request
// carries a bearer token (see package access), each client's calls are
// limited (client-max-calls, client-max-queue), sessions belong to the
// client that opened them, and every call's log line names its client.

// checkListen refuses to listen beyond loopback without access control,
// unless told to with --insecure-no-auth, which it logs loudly.
func checkListen(o *options, log hclog.Logger) error {
	if o.listen == listenNone {
		return nil // no HTTP: the socket alone (local.go)
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", o.listen, err)
	}
	switch {
	case isLoopback(host):
		return nil
	case o.auth.Configured():
		log.Info("pyrun speaks plain HTTP: beyond a trusted network, put a proxy that terminates TLS in front, or tokens travel in clear", "listen", o.listen)
		return nil
	case o.insecureNoAuth:
		log.Warn("INSECURE: listening beyond loopback without access control (--insecure-no-auth): anyone who can reach this address can run code on this machine", "listen", o.listen)
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without access control: whoever reaches pyrun serve runs code. "+
		"Give each client a token with --auth-token-file FILE (lines of name:token; clients send Authorization: Bearer <token>), "+
		"or accept an identity provider's JWTs with --auth-issuer URL (and --public-url); "+
		"or listen only on loopback (127.0.0.1:3001, [::1]:3001, localhost:3001), behind a reverse proxy that authenticates. "+
		"To serve a trusted, isolated network without access control anyway, add --insecure-no-auth", o.listen)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newGuard builds the access control o configures, for a service listening
// on addr; nil when o configures none.
func newGuard(o *options, addr string, log hclog.Logger) (*access.Guard, error) {
	if !o.auth.Configured() {
		return nil, nil
	}
	cfg := o.auth
	if cfg.PublicURL == "" && cfg.Issuer != "" {
		host, _, _ := net.SplitHostPort(addr)
		if !isLoopback(host) {
			return nil, fmt.Errorf("auth-issuer needs public-url, the URL clients reach pyrun at (https://pyrun.example.com), when pyrun listens on %s", addr)
		}
		cfg.PublicURL = "http://" + addr
	}
	g, err := access.New(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("access control: %w", err)
	}
	if cfg.Issuer != "" {
		// Bounded by the key set's own fetch timeout.
		if err := g.Prefetch(context.Background()); err != nil {
			log.Warn("the issuer's signing keys could not be fetched; JWTs are refused until they can be", "error", err)
		}
	}
	return g, nil
}

// authMode names, for the log, which credentials pyrun accepts.
func (o *options) authMode() string {
	switch {
	case o.auth.TokenFile != "" && o.auth.Issuer != "":
		return "tokens and JWTs"
	case o.auth.TokenFile != "":
		return "tokens"
	case o.auth.Issuer != "":
		return "JWTs"
	case o.insecureNoAuth:
		return "none (--insecure-no-auth)"
	}
	return "none (loopback only)"
}

// withMetadata serves the guard's protected resource metadata documents
// beside h; g may be nil.
func withMetadata(g *access.Guard, h http.Handler) http.Handler {
	docs := g.MetadataHandlers()
	if len(docs) == 0 {
		return h
	}
	mux := http.NewServeMux()
	for pattern, doc := range docs {
		mux.Handle(pattern, doc)
	}
	mux.Handle("/", h)
	return mux
}

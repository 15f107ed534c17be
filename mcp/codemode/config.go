package codemode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Server is one entry of the mcp_servers config: the shape of Claude
// Desktop's, Cursor's and VS Code's mcpServers entries (command, args, env
// for a server pyrun starts; url, headers for Streamable HTTP), plus
// pyrun's allow and timeout. It is copied, never written.
type Server struct {
	// Command and Args start a stdio server; Env is added to pyrun's own
	// environment for it, and Cwd, if set, is its working folder.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// URL is a Streamable HTTP endpoint; Headers go with every request
	// (an Authorization header, say).
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Type is VS Code's "stdio" or "http"; empty: from Command or URL.
	Type string `json:"type,omitempty"`
	// Allow lists the tools code may call, by their MCP names. nil: none.
	Allow []string `json:"allow,omitempty"`
	// Timeout bounds each tool call. 0: DefaultTimeout.
	Timeout Duration `json:"timeout,omitempty"`
}

// DefaultTimeout bounds a tool call when its server names no timeout.
const DefaultTimeout = 30 * time.Second

// Duration is a time.Duration that JSON spells as Go does ("30s") or as a
// number of seconds.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("timeout %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("timeout must be a duration such as \"30s\" or a number of seconds, not %s", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// stdio reports whether pyrun starts the server itself.
func (s Server) stdio() bool { return s.Command != "" }

func (s Server) timeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultTimeout
	}
	return time.Duration(s.Timeout)
}

var serverName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// ParseServers decodes and checks an mcp_servers object. Its errors name
// the server and the key at fault.
func ParseServers(raw []byte) (map[string]Server, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("mcp_servers must be an object of server names to their settings: %w", err)
	}
	servers := make(map[string]Server, len(entries))
	for name, e := range entries {
		if !serverName.MatchString(name) {
			return nil, fmt.Errorf("mcp_servers: %q is not a server name: use a letter, then letters, digits, _ or -", name)
		}
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		var s Server
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("mcp_servers.%s: %w", name, err)
		}
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("mcp_servers.%s: %w", name, err)
		}
		servers[name] = s
	}
	return servers, nil
}

func (s Server) check() error {
	switch {
	case s.Command != "" && s.URL != "":
		return errors.New("give command (a server pyrun starts) or url (Streamable HTTP), not both")
	case s.Command == "" && s.URL == "":
		return errors.New("give command (a server pyrun starts) or url (Streamable HTTP)")
	case s.Type != "" && s.Type != "stdio" && s.Type != "http" && s.Type != "streamable-http":
		return fmt.Errorf("type must be stdio or http, not %q", s.Type)
	case s.Type == "stdio" && s.Command == "", s.Type != "" && s.Type != "stdio" && s.URL == "":
		return fmt.Errorf("type %s does not match: stdio needs command, http needs url", s.Type)
	case s.Command == "" && (len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != ""):
		return errors.New("args, env and cwd are for a server pyrun starts (command)")
	case s.URL == "" && len(s.Headers) > 0:
		return errors.New("headers are for an HTTP server (url)")
	case s.Timeout < 0:
		return errors.New("timeout must not be negative")
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q is not an http or https URL", s.URL)
		}
	}
	for _, t := range s.Allow {
		if strings.TrimSpace(t) == "" {
			return errors.New("allow holds an empty tool name")
		}
	}
	return nil
}

// equal reports whether two settings would run the same connection.
func (s Server) equal(o Server) bool {
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(o)
	return bytes.Equal(a, b)
}

// allowed reports whether the settings allow a tool.
func (s Server) allowed(tool string) bool { return slices.Contains(s.Allow, tool) }

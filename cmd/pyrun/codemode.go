package main

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/mcp/codemode"
)

// serversFlag holds mcp_servers: the JSON object of MCP servers whose tools
// Python code may call (docs/code-mode.md). Its String is canonical JSON,
// so that a reload sees whether it changed.
type serversFlag struct {
	servers map[string]codemode.Server
}

func (f *serversFlag) Set(s string) error {
	m, err := codemode.ParseServers([]byte(s))
	if err != nil {
		return err
	}
	f.servers = m
	return nil
}

func (f *serversFlag) String() string {
	if f == nil || len(f.servers) == 0 {
		return ""
	}
	b, _ := json.Marshal(f.servers)
	return string(b)
}

// hubSettle bounds how long pyrun, once its workers are up, waits for MCP
// servers still connecting before it serves, so that the first tool list a
// client gets describes their tools; later ones reach clients as a changed
// tool list.
const hubSettle = 3 * time.Second

// startHub connects to the configured MCP servers in the background: a
// server that cannot start is logged and left out, and never holds up
// pyrun's own start.
func startHub(o *options, log hclog.Logger) *codemode.Hub {
	hub := codemode.New(o.hubOptions(), version, log.Named("mcp-servers"))
	hub.Configure(o.mcpServers.servers)
	return hub
}

//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP floor: what the go-sdk alone costs a stdio tool call, server and
// client, with no pyrun in it. The benchmark runs itself as a go-sdk server
// whose one tool answers every call at once with a canned result shaped as
// pyrun's answer to print(1); the same client as the stdio tier calls it.
// A pyrun stdio call is that round trip, plus the supervisor tier (the
// worker and the pipe to it), plus pyrun's own MCP layer: so stdio's ratio
// to the floor can get no lower than (MCP floor + supervisor) / floor.

// mcpFloorEnv makes the benchmark binary serve the MCP floor on stdio.
const mcpFloorEnv = "PYRUN_BENCH_MCP_FLOOR"

// cannedText and cannedStructured are pyrun's result of print(1).
const cannedText = "<status>success</status>\n<output>\n1\n</output>"

var cannedStructured = json.RawMessage(`{"status":"success","stdout":"1\n","stderr":"","output":[{"stream":"stdout","text":"1\n"}],"return_value":null,"error":null,"dependencies":[],"exit_code":0,"duration_ms":0.18}`)

// serveMCPFloor is the MCP floor's server, on stdio or, for transport
// "http", on Streamable HTTP at a loopback port it prints on stdout.
func serveMCPFloor(transport string) error {
	s := mcpFloorServer()
	if transport != "http" {
		return s.Run(context.Background(), &sdk.StdioTransport{})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	return http.Serve(ln, h)
}

// mcpFloorServer decodes each call's arguments, as any server must, and
// answers with the canned result.
func mcpFloorServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "mcp-floor", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "run_python_code", InputSchema: json.RawMessage(`{"type":"object","properties":{"python_code":{"type":"string"}},"required":["python_code"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct {
				Code string `json:"python_code"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: cannedText}}, StructuredContent: cannedStructured}, nil
		})
	return s
}

// benchMCPFloor measures n calls of the MCP floor over transport ("stdio"
// or "http", Streamable HTTP with a session), and its server's CPU time
// per call in microseconds.
func benchMCPFloor(ctx context.Context, transport string, n, warmup int) (sample, float64, error) {
	self, err := os.Executable()
	if err != nil {
		return sample{}, 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), mcpFloorEnv+"="+transport)
	cmd.Stderr = os.Stderr
	var tr sdk.Transport = &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Second}
	if transport == "http" {
		out, err := cmd.StdoutPipe()
		if err != nil {
			return sample{}, 0, err
		}
		if err := cmd.Start(); err != nil {
			return sample{}, 0, fmt.Errorf("start the MCP floor: %w", err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		addr, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return sample{}, 0, fmt.Errorf("the MCP floor did not say where it listens: %w", err)
		}
		// As startServe's client: one keep-alive connection.
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		tr = &sdk.StreamableClientTransport{Endpoint: "http://" + strings.TrimSpace(addr) + "/mcp", HTTPClient: hc, MaxRetries: -1}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, tr, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	if err != nil {
		return sample{}, 0, fmt.Errorf("connect to the MCP floor: %w", err)
	}
	defer cs.Close()
	var before time.Duration
	s, err := measure(n, warmup, func(i int) error {
		if i == warmup {
			before, _ = cpuTime(cmd.Process.Pid)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": code}})
		if err == nil && res.IsError {
			err = fmt.Errorf("the MCP floor answered an error")
		}
		return err
	})
	if err != nil {
		return s, 0, err
	}
	after, _ := cpuTime(cmd.Process.Pid)
	return s, perCallUS(after-before, n), nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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

// serveMCPFloor is the MCP floor's server: it decodes each call's
// arguments, as any server must, and answers with the canned result.
func serveMCPFloor() error {
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
	return s.Run(context.Background(), &sdk.StdioTransport{})
}

// benchMCPFloor measures n calls of the MCP floor, and its server's CPU
// time per call in microseconds.
func benchMCPFloor(ctx context.Context, n, warmup int) (sample, float64, error) {
	self, err := os.Executable()
	if err != nil {
		return sample{}, 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), mcpFloorEnv+"=1")
	cmd.Stderr = os.Stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Second}, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	if err != nil {
		return sample{}, 0, fmt.Errorf("start the MCP floor: %w", err)
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

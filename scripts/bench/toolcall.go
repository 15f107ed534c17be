//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolCallReport is code mode's cost: what one tool call from Python takes
// through pyrun (worker -> supervisor -> MCP server and back), against the
// same call made directly by an MCP client (the go-sdk's, in this process).
type toolCallReport struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Calls  int    `json:"calls_per_run"`
	Runs   int    `json:"runs"`
	// Per tool call, median over the runs: sequential awaits, and
	// asyncio.gather of all of them (pyrun runs 4 at once).
	SequentialMS float64 `json:"sequential_ms"`
	GatherMS     float64 `json:"gather_ms"`
	// DirectMS is the same call from a go-sdk client straight to the server.
	DirectMS float64 `json:"direct_ms"`
}

// serversDir is where the code-mode tests install the real MCP servers;
// npm ci installs them if they are not there yet.
func serversDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module: %w", err)
	}
	dir := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "mcp", "codemode", "codemodetest", "servers")
	mods := filepath.Join(dir, "node_modules", "@modelcontextprotocol")
	if _, err := os.Stat(filepath.Join(mods, "server-memory", "dist", "index.js")); err == nil {
		return mods, nil
	}
	progress("installing the MCP servers (npm ci in %s)", dir)
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm ci: %w", err)
	}
	return mods, nil
}

// benchToolCall times read_graph of server-memory (an empty graph) from
// Python: runs of n calls, less a run of none, over n.
func benchToolCall(ctx context.Context, o *opts) (*toolCallReport, error) {
	mods, err := serversDir(ctx)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "pyrun-bench-memory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(mods, "server-memory", "dist", "index.js")
	env := map[string]string{"MEMORY_FILE_PATH": filepath.Join(tmp, "memory.jsonl")}
	servers, _ := json.Marshal(map[string]any{"memory": map[string]any{
		"command": node, "args": []string{script}, "env": env, "allow": []string{"read_graph"},
	}})
	const n = 40
	p, err := startPyrun(ctx, o, "warn", "--workers", "1", "--mcp-servers", string(servers), "--max-tool-calls", "1000")
	if err != nil {
		return nil, err
	}
	defer p.close()
	timeRun := func(code string) (time.Duration, error) {
		began := time.Now()
		_, err := p.call(ctx, code, nil)
		return time.Since(began), err
	}
	empty := "import mcp_tools\nNone"
	seq := fmt.Sprintf("import mcp_tools\nfor _ in range(%d):\n    await mcp_tools.memory.read_graph()", n)
	gather := fmt.Sprintf("import asyncio, mcp_tools\nawait asyncio.gather(*(mcp_tools.memory.read_graph() for _ in range(%d)))", n)
	for _, c := range []string{empty, seq, gather} { // warm up
		if _, err := timeRun(c); err != nil {
			return nil, err
		}
	}
	var seqs, gathers []float64
	for range max(o.runs, 3) {
		e, err := timeRun(empty)
		if err != nil {
			return nil, err
		}
		s, err := timeRun(seq)
		if err != nil {
			return nil, err
		}
		g, err := timeRun(gather)
		if err != nil {
			return nil, err
		}
		seqs = append(seqs, ms(s-e)/n)
		gathers = append(gathers, ms(g-e)/n)
	}

	// The floor: the same call from a go-sdk client, straight to the server.
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "MEMORY_FILE_PATH="+env["MEMORY_FILE_PATH"])
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to server-memory: %w", err)
	}
	defer cs.Close()
	var directs []float64
	for r := range max(o.runs, 3) + 1 {
		began := time.Now()
		for range n {
			if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_graph", Arguments: map[string]any{}}); err != nil {
				return nil, err
			}
		}
		if r > 0 { // the first is the warm-up
			directs = append(directs, ms(time.Since(began))/n)
		}
	}
	return &toolCallReport{
		Server: "server-memory", Tool: "read_graph", Calls: n, Runs: len(seqs),
		SequentialMS: round3(median(seqs)), GatherMS: round3(median(gathers)), DirectMS: round3(median(directs)),
	}, nil
}

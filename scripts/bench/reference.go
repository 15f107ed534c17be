//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// The reference, pydantic's mcp-run-python 0.0.22, beside pyrun in one run,
// so that docs/performance.md's comparison is measured, not quoted. Its code is not
// part of this repository, nor is any recipe that builds it: -reference
// names a checkout the user made (scripts/bench/README.md gives the git
// commands), and the bench runs it as its own main.py does: a copy of its
// deno folder, its dependencies installed there by its own `noop` mode,
// then `deno run ... src/main.ts stdio`. Deno is pyrun's, from npm; the
// copy and Deno's caches live under -reference-cache.

// referenceDenoDir is the reference's Deno program inside its checkout.
const referenceDenoDir = "mcp_run_python/deno"

type referenceReport struct {
	Dir string `json:"dir"`
	// Error says why the reference could not be measured; the other
	// fields are then empty.
	Error string `json:"error,omitempty"`
	Runs  int    `json:"runs"`
	// Cold is spawn to the first `1 + 1` result (handshake included), for
	// the reference and for pyrun stdio with a pool of its own.
	ReferenceCold *series `json:"reference_cold"`
	PyrunCold     *series `json:"pyrun_cold"`
	ColdRatio     float64 `json:"cold_pyrun_over_reference"`
	// Warm is sequential `1 + 1` calls on a settled server, p50.
	ReferenceWarmMS float64 `json:"reference_warm_p50_ms"`
	PyrunWarmMS     float64 `json:"pyrun_warm_p50_ms"`
	WarmRatio       float64 `json:"warm_pyrun_over_reference"`
	// Agent is Monty's ten agent blocks: the reference replays them
	// statelessly (call i runs blocks 1..i, the only way it can), pyrun
	// runs them in a new Python session per run.
	ReferenceAgentMS float64 `json:"reference_agent_replay_ms"`
	PyrunAgentMS     float64 `json:"pyrun_agent_session_ms"`
	AgentRatio       float64 `json:"agent_pyrun_over_reference"`
}

// benchReference measures the reference and pyrun side by side.
func benchReference(ctx context.Context, rt *supervisor.Runtime, o *opts) *referenceReport {
	r := &referenceReport{Dir: o.reference, Runs: o.runs}
	ref, err := prepareReference(ctx, rt, o)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if err := r.measure(ctx, o, ref); err != nil {
		r.Error = err.Error()
	}
	return r
}

// referenceEnv is a prepared copy of the reference.
type referenceEnv struct {
	deno, dir string
	env       []string
}

func (e *referenceEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.deno, args...)
	cmd.Dir, cmd.Env = e.dir, e.env
	return cmd
}

// prepareReference copies the reference's deno folder (without
// node_modules, as its main.py does) and installs its dependencies with
// its own `noop` mode.
func prepareReference(ctx context.Context, rt *supervisor.Runtime, o *opts) (*referenceEnv, error) {
	src := filepath.Join(o.reference, referenceDenoDir)
	if _, err := os.Stat(filepath.Join(src, "src", "main.ts")); err != nil {
		return nil, fmt.Errorf("-reference %s: no %s/src/main.ts: not a checkout of pydantic/mcp-run-python (see scripts/bench/README.md)", o.reference, referenceDenoDir)
	}
	if _, err := os.Stat(filepath.Join(src, "src", "prepareEnvCode.ts")); err != nil {
		return nil, fmt.Errorf("-reference %s: no src/prepareEnvCode.ts: the checkout is not built; run its own `make build` first (see scripts/bench/README.md)", o.reference)
	}
	cache := o.referenceCache
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	work := filepath.Join(cache, "mcp-run-python")
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := copyTree(src, work); err != nil {
		return nil, fmt.Errorf("copy the reference: %w", err)
	}
	e := &referenceEnv{deno: rt.Deno, dir: work, env: append(os.Environ(),
		"DENO_DIR="+filepath.Join(cache, "deno"), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1")}
	progress("reference: installing its dependencies (deno ... src/main.ts noop) in %s", work)
	install := e.command("run", "--allow-net", "--allow-read=./node_modules", "--allow-write=./node_modules",
		"--node-modules-dir=auto", "src/main.ts", "noop")
	out, err := install.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("the reference's dependencies did not install (%v): %s", err, lastLines(string(out), 6))
	}
	return e, nil
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// startReference starts the reference over stdio, as its main.py runs
// it, and connects a go-sdk client to it.
func startReference(ctx context.Context, e *referenceEnv) (*sdk.ClientSession, time.Time, error) {
	cmd := e.command("run", "--allow-net", "--allow-read=./node_modules", "--node-modules-dir=auto",
		"src/main.ts", "stdio", "--return-mode=xml")
	cmd.Stderr = io.Discard
	client := sdk.NewClient(&sdk.Implementation{Name: "pyrun-bench", Version: "1"}, nil)
	began := time.Now()
	s, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: sessionRevision})
	return s, began, err
}

// referenceCall calls the reference's run_python_code; its result is
// mcp-run-python's XML text alone.
func referenceCall(ctx context.Context, s *sdk.ClientSession, code string) (string, error) {
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: map[string]any{"python_code": code}})
	if err != nil {
		return "", err
	}
	text := contentText(res)
	if res.IsError || !strings.HasPrefix(text, "<status>success</status>") {
		return "", fmt.Errorf("the reference's call failed: %s", text)
	}
	return text, nil
}

func (r *referenceReport) measure(ctx context.Context, o *opts, e *referenceEnv) error {
	// Cold starts, one after the other: the reference, then pyrun.
	var refCold, pyCold []time.Duration
	for range o.runs {
		s, began, err := startReference(ctx, e)
		if err != nil {
			return fmt.Errorf("start the reference: %w", err)
		}
		_, err = referenceCall(ctx, s, localCode)
		refCold = append(refCold, time.Since(began))
		_ = s.Close()
		if err != nil {
			return err
		}
		p, err := startPyrun(ctx, o, "warn")
		if err != nil {
			return err
		}
		_, err = p.call(ctx, localCode, nil)
		pyCold = append(pyCold, time.Since(p.started))
		p.close()
		if err != nil {
			return err
		}
	}
	r.ReferenceCold, r.PyrunCold = newSeries(refCold), newSeries(pyCold)
	r.ColdRatio = round3(r.PyrunCold.P50MS / r.ReferenceCold.P50MS)

	// Warm calls and the agent run, on one settled server each.
	s, _, err := startReference(ctx, e)
	if err != nil {
		return fmt.Errorf("start the reference: %w", err)
	}
	defer s.Close()
	p, err := startPyrun(ctx, o, "warn", "--workers", "2")
	if err != nil {
		return err
	}
	defer p.close()
	const warmN, settle = 300, 200
	var refWarm, pyWarm []time.Duration
	for i := range settle + warmN {
		// In turns, so that both see the same load.
		began := time.Now()
		if _, err := referenceCall(ctx, s, localCode); err != nil {
			return err
		}
		if i >= settle {
			refWarm = append(refWarm, time.Since(began))
		}
		began = time.Now()
		if _, err := p.call(ctx, localCode, nil); err != nil {
			return err
		}
		if i >= settle {
			pyWarm = append(pyWarm, time.Since(began))
		}
	}
	r.ReferenceWarmMS, r.PyrunWarmMS = newSeries(refWarm).P50MS, newSeries(pyWarm).P50MS
	r.WarmRatio = round3(r.PyrunWarmMS / r.ReferenceWarmMS)

	var refAgent, pyAgent []time.Duration
	for range o.runs {
		began := time.Now()
		var text string
		for i := range agentBlocks {
			if text, err = referenceCall(ctx, s, strings.Join(agentBlocks[:i+1], "\n")); err != nil {
				return fmt.Errorf("the reference's replay of block %d: %w", i+1, err)
			}
		}
		refAgent = append(refAgent, time.Since(began))
		if !strings.Contains(text, agentExpected) {
			return fmt.Errorf("the reference's replay printed %q, want %q", text, agentExpected)
		}
		began = time.Now()
		out, _, err := agentSession(ctx, p)
		if err != nil {
			return err
		}
		pyAgent = append(pyAgent, time.Since(began))
		if strings.TrimSpace(out) != agentExpected {
			return fmt.Errorf("pyrun's session printed %q, want %q", out, agentExpected)
		}
	}
	r.ReferenceAgentMS, r.PyrunAgentMS = newSeries(refAgent).P50MS, newSeries(pyAgent).P50MS
	r.AgentRatio = round3(r.PyrunAgentMS / r.ReferenceAgentMS)
	return nil
}

func (r *referenceReport) targets() []target {
	if r == nil || r.Error != "" {
		return nil
	}
	return []target{
		{"cold start / the reference's", r.ColdRatio, "<= 0.3 x", r.ColdRatio <= 0.3},
		{"warm call / the reference's", r.WarmRatio, "<= 1 x", r.WarmRatio <= 1},
		{"agent run, new session / reference's replay", r.AgentRatio, "<= 0.5 x", r.AgentRatio <= 0.5},
	}
}

func (r *referenceReport) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nagainst the reference, mcp-run-python at %s (median of %d runs)\n", r.Dir, r.Runs)
	if r.Error != "" {
		fmt.Fprintf(w, "  not measured: %s\n", r.Error)
		return
	}
	const row = "  %-44s %12s %12s %8s\n"
	fmt.Fprintf(w, row, "", "pyrun", "reference", "ratio")
	fmt.Fprintf(w, row, "cold: spawn to first 1 + 1 result, p50 ms", f1(r.PyrunCold.P50MS), f1(r.ReferenceCold.P50MS), fmt.Sprintf("%.3fx", r.ColdRatio))
	fmt.Fprintf(w, row, "warm 1 + 1, settled, p50 ms", f3(r.PyrunWarmMS), f3(r.ReferenceWarmMS), fmt.Sprintf("%.3fx", r.WarmRatio))
	fmt.Fprintf(w, row, "agent run (pyrun: new session; ref: replay) ms", f1(r.PyrunAgentMS), f1(r.ReferenceAgentMS), fmt.Sprintf("%.3fx", r.AgentRatio))
}

func f1(x float64) string { return fmt.Sprintf("%.1f", x) }

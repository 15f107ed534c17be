//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// agentBlocks is what a simple code-mode agent sends in one turn: ten
// blocks against one interpreter, each building on the last, after the
// agent run Monty's project publishes (scripts/startup_performance.py,
// AGENT_BLOCKS, in pydantic/monty), written here in blocks of our own
// that do the same steps on the same data and print the same line.
var agentBlocks = []string{
	`orders = [dict(sku="A1", qty=2, price=3.5), dict(sku="B2", qty=1, price=12.0), dict(sku="C3", qty=5, price=1.0)]`,
	"def cost(order):\n    return order[\"qty\"] * order[\"price\"]",
	`costs = [cost(o) for o in orders]`,
	`total = sum(costs)`,
	`top = max(orders, key=cost)["sku"]`,
	"import json\nblob = json.dumps({\"total\": total, \"top\": top})",
	`rate = 0.1 if total > 10 else 0`,
	`after = round(total * (1 - rate), 2)`,
	`line = f"{len(orders)} orders, total {after}, biggest {top}"`,
	`print(line)`,
}

// agentExpected is the agent run's last output.
const agentExpected = "3 orders, total 21.6, biggest B2"

// agentReport times the agent run over pyrun stdio: the ten blocks as ten
// calls in one Python session (the first starts it, "new"; the last ends
// it), against the same blocks replayed statelessly (call i runs blocks
// 1..i, the cheapest correct way without a session, and the way
// mcp-run-python has to). The first agent run on a fresh pyrun is timed
// once, as the first agent to come feels it; the others on the same
// pyrun once settled (agentSettle), each figure the median of Runs, the
// replay and the session taking turns.
type agentReport struct {
	Runs int `json:"runs"`
	// FreshSessionMS is the first session run, the moment both pool
	// workers are ready (the session worker started ahead may not be).
	FreshSessionMS float64 `json:"fresh_session_ms"`
	// SessionMS is the ten calls in one session, its start included;
	// StartMS, the first of them ("new": a namespace on the client's
	// session worker).
	SessionMS float64 `json:"session_ms"`
	StartMS   float64 `json:"session_start_ms"`
	// RestMS is the nine calls after the start.
	RestMS      float64 `json:"session_rest_ms"`
	StatelessMS float64 `json:"stateless_replay_ms"`
	// SessionOverStateless compares the session's nine warm calls with
	// the replay's ten, and the whole session run with the replay.
	RestOverStateless    float64 `json:"session_rest_over_stateless"`
	SessionOverStateless float64 `json:"session_over_stateless"`
	// StartAfterPauseMS is a session's first call (its block 1, "new",
	// ending it) agentPause after the one before: what an agent that
	// thinks between sessions waits.
	StartAfterPauseMS float64 `json:"session_start_after_pause_ms"`
}

const (
	// agentPause is the pause before each "new" of StartAfterPauseMS.
	agentPause = 3 * time.Second
	// agentRuns is how many settled runs the medians are of: runs are
	// cheap (20 calls), and single runs on a shared 2-core machine
	// spread by 2x.
	agentRuns = 25
	// agentSettleCalls and agentSettleRuns settle pyrun before the
	// settled runs, as the reference's tier does (reference.go): that many
	// stateless calls and whole session runs; then agentSettleIdle lets
	// the fresh workers started meanwhile run their warming calls.
	agentSettleCalls = 200
	agentSettleRuns  = 5
	agentSettleIdle  = 10 * time.Second
)

func benchAgent(ctx context.Context, o *opts) (*agentReport, error) {
	p, err := startTwoWorkers(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.close()
	r := &agentReport{Runs: agentRuns}
	began := time.Now()
	if _, _, err := agentRun(ctx, p); err != nil {
		return nil, err
	}
	r.FreshSessionMS = ms(time.Since(began))

	for range agentSettleCalls {
		if _, err := p.call(ctx, "x = 1", nil); err != nil {
			return nil, fmt.Errorf("settling: %w", err)
		}
	}
	for range agentSettleRuns {
		if _, _, err := agentRun(ctx, p); err != nil {
			return nil, fmt.Errorf("settling: %w", err)
		}
	}
	if err := sleepCtx(ctx, agentSettleIdle); err != nil {
		return nil, err
	}

	var sess, start, rest, stateless []time.Duration
	for range agentRuns {
		began := time.Now()
		var out string
		for i := range agentBlocks {
			res, err := p.call(ctx, strings.Join(agentBlocks[:i+1], "\n"), nil)
			if err != nil {
				return nil, fmt.Errorf("stateless replay of block %d: %w", i+1, err)
			}
			out = stdoutOf(res)
		}
		stateless = append(stateless, time.Since(began))
		if strings.TrimSpace(out) != agentExpected {
			return nil, fmt.Errorf("stateless replay printed %q, want %q", out, agentExpected)
		}
		total, first, err := agentRun(ctx, p)
		if err != nil {
			return nil, err
		}
		sess, start, rest = append(sess, total), append(start, first), append(rest, total-first)
	}
	// As an agent that thinks between sessions.
	var paused []time.Duration
	for range o.runs {
		if err := sleepCtx(ctx, agentPause); err != nil {
			return nil, err
		}
		began := time.Now()
		res, err := p.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code",
			Arguments: map[string]any{"python_code": agentBlocks[0], "session_id": "new", "end_session": true}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %s", contentText(res))
		}
		if err != nil {
			return nil, fmt.Errorf("session after a pause: %w", err)
		}
		paused = append(paused, time.Since(began))
	}
	med := func(ds []time.Duration) float64 { return newSeries(ds).P50MS }
	r.SessionMS, r.StartMS, r.RestMS, r.StatelessMS = med(sess), med(start), med(rest), med(stateless)
	r.StartAfterPauseMS = med(paused)
	r.RestOverStateless = round2(r.RestMS / r.StatelessMS)
	r.SessionOverStateless = round2(r.SessionMS / r.StatelessMS)
	return r, nil
}

// agentRun runs the agent blocks in a new session and checks what it
// printed: how long the ten calls took, and the first of them.
func agentRun(ctx context.Context, p *pyrunProc) (total, first time.Duration, err error) {
	began := time.Now()
	out, first, err := agentSession(ctx, p)
	if err != nil {
		return 0, 0, err
	}
	total = time.Since(began)
	if strings.TrimSpace(out) != agentExpected {
		return 0, 0, fmt.Errorf("the session printed %q, want %q", out, agentExpected)
	}
	return total, first, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stdoutOf and sessionIDOf read a result's structured content.
func stdoutOf(res *sdk.CallToolResult) string { return structuredOf(res).Stdout }

func sessionIDOf(res *sdk.CallToolResult) string { return structuredOf(res).SessionID }

func structuredOf(res *sdk.CallToolResult) (sc struct {
	Stdout    string `json:"stdout"`
	SessionID string `json:"session_id"`
}) {
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &sc)
	return sc
}

// agentSession runs the agent blocks in a new Python session, ending it
// with the last, and returns the last block's output and how long the
// first block (the session's start) took.
func agentSession(ctx context.Context, p *pyrunProc) (out string, first time.Duration, err error) {
	began := time.Now()
	id := "new"
	for i, block := range agentBlocks {
		args := map[string]any{"python_code": block, "session_id": id}
		if i == len(agentBlocks)-1 {
			args["end_session"] = true
		}
		res, err := p.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %s", contentText(res))
		}
		if err != nil {
			return "", 0, fmt.Errorf("session block %d: %w", i+1, err)
		}
		if i == 0 {
			first = time.Since(began)
			id = sessionIDOf(res)
		}
		out = stdoutOf(res)
	}
	return out, first, nil
}

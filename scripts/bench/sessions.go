//go:build unix

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/procfs"
)

// sessionsReport: Python sessions as namespaces on shared session workers
// (--session-worker shared, docs/sessions.md) over pyrun stdio --workers 2.
// A "new" session's call on a session worker with room against a warm
// stateless call of the same code (20 each, medians); then 100 sessions
// open at once, each keeping its own value and file, and the resident
// memory of pyrun and all its workers with them open.
type sessionsReport struct {
	WarmMS float64 `json:"warm_call_ms"`
	// FirstNewMS is the first "new" (it takes the spare worker started
	// ahead); NewMS, the median of the next 20 "new" calls.
	FirstNewMS  float64 `json:"first_new_session_ms"`
	NewMS       float64 `json:"new_session_ms"`
	NewOverWarm float64 `json:"new_over_warm"`
	// A second call in a session (no switch: the last session again) and
	// one that switches from another session.
	SameMS   float64 `json:"same_session_call_ms"`
	SwitchMS float64 `json:"switching_session_call_ms"`
	Sessions int     `json:"sessions_open"`
	// StateKept: every session read back its own value and file.
	StateKept bool    `json:"state_kept"`
	Processes int     `json:"processes"` // pyrun and its descendants
	RSSMiB    float64 `json:"rss_mib"`   // theirs together
}

func benchSessions(ctx context.Context, o *opts) (*sessionsReport, error) {
	p, err := startTwoWorkers(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.close()
	run := func(code, id string) (string, time.Duration, *sdk.CallToolResult, error) {
		args := map[string]any{"python_code": code}
		if id != "" {
			args["session_id"] = id
		}
		began := time.Now()
		res, err := p.session.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code", Arguments: args})
		took := time.Since(began)
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %s", contentText(res))
		}
		if err != nil {
			return "", took, nil, fmt.Errorf("%w\npyrun's stderr:\n%s", err, p.log.tail())
		}
		return sessionIDOf(res), took, res, nil
	}
	rep := &sessionsReport{}
	// The session worker started ahead with pyrun, ready: no start runs
	// beside the measured calls.
	if err := p.log.waitDedicated(ctx, 1); err != nil {
		return nil, err
	}
	// Warm calls back to back, as the warm tier makes them (between calls
	// of another kind, an idle pool worker runs warming calls, which a
	// call may wait for), the last 20 measured; then the "new" calls, of
	// the same code.
	var warm, news []time.Duration
	for i := range 50 + 20 {
		_, d, _, err := run("v = 1", "")
		if err != nil {
			return nil, err
		}
		if i >= 50 {
			warm = append(warm, d)
		}
	}
	const open = 100
	var ids []string
	for i := range open {
		code := fmt.Sprintf("v = %d", i)
		id, d, _, err := run(code, "new")
		if err != nil {
			return nil, fmt.Errorf("session %d: %w", i, err)
		}
		ids = append(ids, id)
		if i == 0 {
			rep.FirstNewMS = ms(d)
			// It took the spare; the next spare's start must not run
			// beside the measured calls either.
			if err := p.log.waitDedicated(ctx, 2); err != nil {
				return nil, err
			}
		} else if i <= 20 {
			news = append(news, d)
		}
	}
	rep.WarmMS, rep.NewMS = newSeries(warm).P50MS, newSeries(news).P50MS
	rep.NewOverWarm = round2(rep.NewMS / rep.WarmMS)
	for i, id := range ids {
		if _, _, _, err := run("open('mine.txt', 'w').write(str(v))", id); err != nil {
			return nil, fmt.Errorf("session %d: %w", i, err)
		}
	}

	var same, switching []time.Duration
	rep.StateKept = true
	for i, id := range ids {
		_, d, res, err := run("print(v, open('mine.txt').read())", id)
		if err != nil {
			return nil, fmt.Errorf("session %d read back: %w", i, err)
		}
		if got, want := strings.TrimSpace(stdoutOf(res)), fmt.Sprintf("%d %d", i, i); got != want {
			rep.StateKept = false
			progress("session %d read back %q, want %q", i, got, want)
		}
		switching = append(switching, d)
		_, d, _, err = run("v", id)
		if err != nil {
			return nil, err
		}
		same = append(same, d)
	}
	rep.SameMS, rep.SwitchMS = newSeries(same).P50MS, newSeries(switching).P50MS
	rep.Sessions = open

	procs := append([]int{p.cmd.Process.Pid}, descendants(p.cmd.Process.Pid)...)
	var rss int64
	for _, pid := range procs {
		r, _, err := memory(pid)
		if err != nil {
			continue // a process that just ended
		}
		rss += r
	}
	rep.Processes = len(procs)
	rep.RSSMiB = round1(float64(rss) / (1 << 20))
	return rep, nil
}

// descendants lists pid's children, theirs, and so on.
func descendants(pid int) []int {
	var all []int
	for next := []int{pid}; len(next) > 0; {
		var kids []int
		for _, p := range next {
			kids = append(kids, procfs.Children(p)...)
		}
		all = append(all, kids...)
		next = kids
	}
	slices.Sort(all)
	return slices.Compact(all)
}

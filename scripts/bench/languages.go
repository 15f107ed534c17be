//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// languageCase is what the languages measurement runs in one language:
// its tool, the tool's code argument, and a warm call as small as print(1).
type languageCase struct {
	Name, Tool, Arg, Code string
}

var languageCases = []languageCase{
	{"python", "run_python_code", "python_code", "print(1)"},
	{"r", "run_r_code", "r_code", "print(1)"},
	{"javascript", "run_javascript_code", "javascript_code", "console.log(1)"},
}

// languageReport is one language served alone (`pyrun stdio --languages
// <name>`, one worker): spawn to its first result, warm calls, and the
// worker's idle memory, the figures docs/languages.md quotes; then its
// sessions (namespaces on the client's session worker, the default): the
// first "new" (which may wait for that worker's start) and the median of
// languageSessions more, each ended by its one call, against the warm
// call.
type languageReport struct {
	Language      string  `json:"language"`
	Spawn         *series `json:"spawn_to_first_result"`
	Warm          stats   `json:"warm"`
	WorkerRSSMB   float64 `json:"idle_worker_rss_mb"`
	WorkerRSSPeak float64 `json:"worker_rss_after_calls_mb"`
	FirstNewMS    float64 `json:"first_new_session_ms"`
	NewMS         float64 `json:"new_session_ms"`
	NewOverWarm   float64 `json:"new_session_over_warm"`
}

// languageSessions are the "new" sessions timed per language.
const languageSessions = 20

// oneCallSession makes a call a session of its own, ended by it.
var oneCallSession = map[string]any{"session_id": "new", "end_session": true}

// languageCalls are the warm calls measured per language: fewer than the
// Python tiers' n, as an R call is some twenty times slower.
const languageCalls = 200

// benchLanguages measures each language with its pool alone in pyrun.
func benchLanguages(ctx context.Context, o *opts) ([]languageReport, error) {
	var out []languageReport
	for _, lc := range languageCases {
		rep, err := benchLanguage(ctx, o, lc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lc.Name, err)
		}
		out = append(out, rep)
	}
	return out, nil
}

func benchLanguage(ctx context.Context, o *opts, lc languageCase) (languageReport, error) {
	rep := languageReport{Language: lc.Name}
	args := []string{"--languages", lc.Name, "--workers", "1", "--r-workers", "1", "--js-workers", "1"}
	var ds []time.Duration
	for range o.runs {
		p, err := startPyrun(ctx, o, "debug", args...)
		if err != nil {
			return rep, err
		}
		err = callIn(ctx, p, lc, nil)
		d := time.Since(p.started)
		p.close()
		if err != nil {
			return rep, err
		}
		ds = append(ds, d)
	}
	rep.Spawn = newSeries(ds)

	p, err := startPyrun(ctx, o, "debug", args...)
	if err != nil {
		return rep, err
	}
	defer p.close()
	warmup := min(o.warmup, 50)
	s, err := measure(languageCalls, warmup, func(int) error { return callIn(ctx, p, lc, nil) })
	if err != nil {
		return rep, err
	}
	rep.Warm = summarize(s)
	rep.WorkerRSSPeak = workersRSS(p)
	time.Sleep(2 * time.Second) // idle, as the memory measurement does
	rep.WorkerRSSMB = workersRSS(p)

	began := time.Now()
	if err := callIn(ctx, p, lc, oneCallSession); err != nil {
		return rep, fmt.Errorf("first session: %w", err)
	}
	rep.FirstNewMS = ms(time.Since(began))
	var news []time.Duration
	for range languageSessions {
		began := time.Now()
		if err := callIn(ctx, p, lc, oneCallSession); err != nil {
			return rep, fmt.Errorf("session: %w", err)
		}
		news = append(news, time.Since(began))
	}
	rep.NewMS = newSeries(news).P50MS
	rep.NewOverWarm = round2(rep.NewMS / rep.Warm.P50)
	return rep, nil
}

// callIn runs lc's warm call, with the arguments of extra too, and
// checks that it succeeded.
func callIn(ctx context.Context, p *pyrunProc, lc languageCase, extra map[string]any) error {
	args := map[string]any{lc.Arg: lc.Code}
	maps.Copy(args, extra)
	res, err := p.session.CallTool(ctx, &sdk.CallToolParams{Name: lc.Tool, Arguments: args})
	if err != nil {
		return fmt.Errorf("%w\npyrun's stderr:\n%s", err, p.log.tail())
	}
	if res.IsError {
		return fmt.Errorf("tool error: %s", contentText(res))
	}
	return nil
}

// workersRSS is the resident memory of pyrun's worker processes together,
// in MB; 0 when it cannot be read.
func workersRSS(p *pyrunProc) float64 {
	var total int64
	for _, pid := range p.workers() {
		if rss, _, err := memory(pid); err == nil {
			total += rss
		}
	}
	return mb(total)
}

func printLanguages(w io.Writer, reps []languageReport) {
	if len(reps) == 0 {
		return
	}
	fmt.Fprintf(w, "languages, each alone with one worker (%d warm calls of print(1) / console.log(1)):\n", languageCalls)
	fmt.Fprintf(w, "  %-11s %22s %14s %14s %18s %14s %18s\n", "language", "spawn to result p50", "warm p50", "warm p90", "idle worker RSS", "first \"new\"", "\"new\" p50 / warm")
	for _, r := range reps {
		fmt.Fprintf(w, "  %-11s %20.3f s %11.2f ms %11.2f ms %15.1f MB %11.1f ms %9.2f ms %5.2fx\n",
			r.Language, r.Spawn.P50MS/1000, r.Warm.P50, r.Warm.P90, r.WorkerRSSMB, r.FirstNewMS, r.NewMS, r.NewOverWarm)
	}
}

// Command soak drives a `pyrun serve` with many concurrent MCP clients and
// thousands of mixed calls (success, Python errors, timeouts, memory bombs,
// crashes, output floods) while it kills pyrun's workers at random from
// outside, and reports what came back.
//
// Run it from anywhere inside the module (traffic stays on 127.0.0.1):
//
//	go run ./scripts/soak                       # 16 clients, 3000 calls
//	go run ./scripts/soak -clients 32 -calls 10000 -kill-every 1s
//	go run ./scripts/soak -pyrun /tmp/pyrun -json
//
// With -languages python,r,javascript it serves R and JavaScript too (one
// worker each) and mixes their calls in (LanguageMix): results, errors,
// busy loops, and for JavaScript a call stuck in an await.
//
// Every call prints and returns a token of its own; a result holding any
// other call's token is "mixed". A call that gets no answer at all (the
// client gives up after -call-timeout) is "lost". Both must be 0; soak exits
// 1 otherwise. It also reports the statuses per kind of call, the workers it
// killed, and pyrun's peak resident memory (VmHWM), sampled with its current
// RSS while the soak runs. The runtime (Deno and Pyodide) comes from pyrun's
// default runtime folder.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/internal/pyrunserve"
)

// Config is one soak run's shape.
type Config struct {
	Pyrun       string        // the binary; "" builds ./cmd/pyrun
	Clients     int           // concurrent MCP sessions
	Calls       int           // calls in all
	Workers     int           // pyrun's --workers
	Languages   []string      // pyrun's --languages; nil: Python alone. Each other language gets one worker.
	KillEvery   time.Duration // mean time between kills of a random worker; 0: none
	Timeout     time.Duration // pyrun's --timeout
	MemoryLimit string        // pyrun's --memory-limit
	CallTimeout time.Duration // how long a client waits for an answer before the call counts as lost
	Seed        uint64
	Mix         map[string]int // kind of call -> weight; nil: DefaultMix, with LanguageMix's kinds of Languages
	Log         io.Writer      // progress; nil: none
}

// DefaultMix weighs the kinds of calls (see kinds).
// Calls that cost a worker (c-loop, memory, js-memory, crash, exit) are
// rarer: a worker start costs seconds of CPU without a snapshot.
var DefaultMix = map[string]int{
	"ok": 55, "error": 15, "stderr": 5, "flood": 4, "timeout": 6, "sleep": 6,
	"c-loop": 2, "memory": 2, "js-memory": 1, "crash": 2, "exit": 1,
}

// LanguageMix weighs the calls of R and JavaScript (kinds r-* and js-*),
// added to DefaultMix for the languages a run serves besides Python.
var LanguageMix = map[string]map[string]int{
	"r":          {"r-ok": 12, "r-error": 4, "r-timeout": 2},
	"javascript": {"js-ok": 12, "js-error": 4, "js-loop": 1, "js-await": 2},
}

// kind is one kind of call soak makes.
type kind struct {
	// language is the tool's language; "": Python. Python's code reads
	// the call's token as the global T; the others' have TOKEN replaced
	// by it, quoted.
	language string
	code     string
	timeout  float64  // timeout_seconds; 0: pyrun's
	want     []string // statuses that are right for it, besides crashed when its worker was killed
}

// kinds are the calls soak makes. js-memory is Python's: a bomb in
// JavaScript memory made from Python.
var kinds = map[string]kind{
	"ok":        {code: "print(T)\nT", want: []string{"success"}},
	"error":     {code: "print(T)\nraise ValueError(T)", want: []string{"run-error"}},
	"stderr":    {code: "import sys\nfor i in range(200):\n    print(T, i, file=sys.stderr if i % 2 else sys.stdout)\nT", want: []string{"success"}},
	"flood":     {code: "while True:\n    print(T * 20)", timeout: 0.5, want: []string{"timeout"}},
	"timeout":   {code: "print(T)\nwhile True:\n    pass", timeout: 0.5, want: []string{"timeout"}},
	"sleep":     {code: "import time\nprint(T)\ntime.sleep(30)", timeout: 0.5, want: []string{"timeout"}},
	"c-loop":    {code: "print(T)\nsum(range(10**12))", timeout: 0.5, want: []string{"timeout"}},
	"memory":    {code: "print(T)\nx = bytearray(2**31 - 1)", want: []string{"memory-error"}},
	"js-memory": {code: "print(T)\nimport js, time\nx = [js.Uint8Array.new(32 * 2**20).fill(1) for _ in range(64)]\ntime.sleep(30)", want: []string{"memory-error"}},
	"crash":     {code: "print(T)\nimport os\nos._exit(3)", want: []string{"crashed"}},
	"exit":      {code: "print(T)\nimport js\njs.Deno.exit(0)", want: []string{"crashed"}},

	"r-ok":      {language: "r", code: "cat(TOKEN, \"\\n\")\nTOKEN", want: []string{"success"}},
	"r-error":   {language: "r", code: "cat(TOKEN, \"\\n\")\nstop(TOKEN)", want: []string{"run-error"}},
	"r-timeout": {language: "r", code: "cat(TOKEN, \"\\n\")\nwhile (TRUE) {}", timeout: 1, want: []string{"timeout"}},
	"js-ok":     {language: "javascript", code: "console.log(TOKEN);\nTOKEN", want: []string{"success"}},
	"js-error":  {language: "javascript", code: "console.log(TOKEN);\nthrow new Error(TOKEN);", want: []string{"run-error"}},
	"js-loop":   {language: "javascript", code: "console.log(TOKEN);\nwhile (true) {}", timeout: 0.5, want: []string{"timeout"}},
	"js-await":  {language: "javascript", code: "console.log(TOKEN);\nawait new Promise(() => {});", timeout: 0.5, want: []string{"timeout"}},
}

// tools are the tool and code argument of each language.
var tools = map[string][2]string{
	"":           {"run_python_code", "python_code"},
	"r":          {"run_r_code", "r_code"},
	"javascript": {"run_javascript_code", "javascript_code"},
}

// Report is what a soak run found.
type Report struct {
	Sent       int64                     `json:"sent"`
	Answered   int64                     `json:"answered"`
	Lost       int64                     `json:"lost"`
	Mixed      int64                     `json:"mixed"`
	Unexpected int64                     `json:"unexpected"` // a status not right for its kind, and not crashed
	Statuses   map[string]map[string]int `json:"statuses"`   // kind -> status (or "busy", "tool-error") -> calls
	Kills      int64                     `json:"kills"`
	PeakRSSMiB float64                   `json:"peak_rss_mib"`
	LastRSSMiB float64                   `json:"last_rss_mib"`
	Seconds    float64                   `json:"seconds"`
	Examples   []string                  `json:"examples,omitempty"` // a few lost, mixed or unexpected calls
}

func main() {
	var c Config
	flag.StringVar(&c.Pyrun, "pyrun", "", "pyrun binary (default: build ./cmd/pyrun into a temporary folder)")
	flag.IntVar(&c.Clients, "clients", 16, "concurrent MCP sessions")
	flag.IntVar(&c.Calls, "calls", 3000, "calls in all")
	flag.IntVar(&c.Workers, "workers", 2, "pyrun's --workers")
	languages := flag.String("languages", "python", "pyrun's --languages: python, r, javascript, comma-separated")
	flag.DurationVar(&c.KillEvery, "kill-every", 3*time.Second, "mean time between kills of a random worker (0: none)")
	flag.DurationVar(&c.Timeout, "timeout", 5*time.Second, "pyrun's --timeout")
	flag.StringVar(&c.MemoryLimit, "memory-limit", "256MiB", "pyrun's --memory-limit")
	flag.DurationVar(&c.CallTimeout, "call-timeout", 2*time.Minute, "how long a client waits for an answer")
	flag.Uint64Var(&c.Seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	c.Languages = strings.Split(*languages, ",")
	c.Log = os.Stderr
	rep, err := Run(context.Background(), c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(2)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		rep.Print(os.Stdout)
	}
	if rep.Lost != 0 || rep.Mixed != 0 || rep.Answered != rep.Sent {
		os.Exit(1)
	}
}

// Print writes the report for people.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "sent %d, answered %d, lost %d, mixed %d, unexpected %d, workers killed %d, in %.1fs\n",
		r.Sent, r.Answered, r.Lost, r.Mixed, r.Unexpected, r.Kills, r.Seconds)
	fmt.Fprintf(w, "pyrun's peak RSS %.1f MiB, at the end %.1f MiB\n", r.PeakRSSMiB, r.LastRSSMiB)
	names := slices.Sorted(maps.Keys(r.Statuses))
	for _, k := range names {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(r.Statuses[k])) {
			parts = append(parts, fmt.Sprintf("%s %d", s, r.Statuses[k][s]))
		}
		fmt.Fprintf(w, "  %-10s %s\n", k, strings.Join(parts, ", "))
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  ! %s\n", e)
	}
}

// Run starts pyrun serve, soaks it and stops it.
func Run(ctx context.Context, c Config) (Report, error) {
	if c.Mix == nil {
		c.Mix = maps.Clone(DefaultMix)
		for _, l := range c.Languages {
			maps.Copy(c.Mix, LanguageMix[l])
		}
	}
	for k := range c.Mix {
		if l := kinds[k].language; l != "" && !slices.Contains(c.Languages, l) {
			return Report{}, fmt.Errorf("kind of call %q needs -languages to hold %s", k, l)
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Pyrun == "" {
		dir, err := os.MkdirTemp("", "pyrun-soak-")
		if err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(c.Log, "soak: building pyrun ...")
		if c.Pyrun, err = pyrunserve.Build(ctx, dir, c.Log); err != nil {
			return Report{}, err
		}
	}
	srv, err := startServe(ctx, c)
	if err != nil {
		return Report{}, err
	}
	defer srv.Stop()
	fmt.Fprintf(c.Log, "soak: pyrun serve at %s (pid %d); %d clients, %d calls\n", srv.Base, srv.Cmd.Process.Pid, c.Clients, c.Calls)
	return soak(ctx, c, srv)
}

// startServe starts pyrun serve and waits until its workers are ready, so
// that start-up is not counted.
func startServe(ctx context.Context, c Config) (*pyrunserve.Server, error) {
	args := []string{"--workers", strconv.Itoa(c.Workers), "--timeout", c.Timeout.String(), "--memory-limit", c.MemoryLimit,
		"--queue-timeout", c.CallTimeout.String(), "--network", "none"}
	ready := c.Workers // workers to wait for: each other language has one
	if len(c.Languages) > 0 {
		args = append(args, "--languages", strings.Join(c.Languages, ","), "--r-workers", "1", "--js-workers", "1")
		ready += len(c.Languages) - 1
	}
	return pyrunserve.Start(ctx, c.Pyrun, ready, args...)
}

var tokenRE = regexp.MustCompile(`tok[0-9]+x`)

func soak(ctx context.Context, c Config, srv *pyrunserve.Server) (Report, error) {
	rep := Report{Statuses: map[string]map[string]int{}}
	var mu sync.Mutex // guards rep's maps and Examples
	example := func(format string, args ...any) {
		mu.Lock()
		if len(rep.Examples) < 10 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var names []string
	total := 0
	for k, w := range c.Mix {
		if _, ok := kinds[k]; !ok || w <= 0 {
			return rep, fmt.Errorf("unknown kind of call %q", k)
		}
		names = append(names, k)
		total += w
	}
	slices.Sort(names)
	pick := func(r *rand.Rand) string {
		n := r.IntN(total)
		for _, k := range names {
			if n -= c.Mix[k]; n < 0 {
				return k
			}
		}
		return names[0]
	}

	sessions := make([]*sdk.ClientSession, c.Clients)
	for i := range sessions {
		client := sdk.NewClient(&sdk.Implementation{Name: fmt.Sprintf("soak-%d", i), Version: "1"}, nil)
		cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.Base + "/mcp", MaxRetries: -1}, nil)
		if err != nil {
			return rep, fmt.Errorf("client %d: %w", i, err)
		}
		defer cs.Close()
		sessions[i] = cs
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	var kills atomic.Int64
	var peak atomic.Int64
	bg.Go(func() { sampleRSS(srv.Cmd.Process.Pid, stop, &peak) })
	if c.KillEvery > 0 {
		bg.Go(func() {
			killWorkers(srv.Cmd.Process.Pid, c.KillEvery, rand.New(rand.NewPCG(c.Seed, 1)), stop, &kills, c.Log)
		})
	}

	began := time.Now()
	var next atomic.Int64
	var clients sync.WaitGroup
	for i, cs := range sessions {
		clients.Go(func() {
			r := rand.New(rand.NewPCG(c.Seed, uint64(i)+2))
			for {
				n := next.Add(1)
				if n > int64(c.Calls) {
					return
				}
				kind := pick(r)
				token := fmt.Sprintf("tok%dx", n)
				atomic.AddInt64(&rep.Sent, 1)
				status, text, err := call(ctx, cs, kind, token, c.CallTimeout)
				if err != nil {
					atomic.AddInt64(&rep.Lost, 1)
					example("lost: %s %s: %v", kind, token, err)
					continue
				}
				atomic.AddInt64(&rep.Answered, 1)
				if n%500 == 0 {
					fmt.Fprintf(c.Log, "soak: %d calls answered or lost, %d workers killed, %.0fs\n", n, kills.Load(), time.Since(began).Seconds())
				}
				mu.Lock()
				if rep.Statuses[kind] == nil {
					rep.Statuses[kind] = map[string]int{}
				}
				rep.Statuses[kind][status]++
				mu.Unlock()
				for _, t := range tokenRE.FindAllString(text, -1) {
					if t != token {
						atomic.AddInt64(&rep.Mixed, 1)
						example("mixed: %s %s holds %s: %.300s", kind, token, t, text)
						break
					}
				}
				if !slices.Contains(kinds[kind].want, status) && status != "crashed" && status != "busy" {
					atomic.AddInt64(&rep.Unexpected, 1)
					example("unexpected: %s %s ended %s: %.300s", kind, token, status, text)
				}
			}
		})
	}
	clients.Wait()
	close(stop)
	bg.Wait()
	rep.Seconds = time.Since(began).Seconds()
	rep.Kills = kills.Load()
	rep.PeakRSSMiB = float64(max(peak.Load(), hwm(srv.Cmd.Process.Pid))) / (1 << 20)
	if rss, err := procfs.Status(srv.Cmd.Process.Pid, "VmRSS"); err == nil {
		rep.LastRSSMiB = float64(rss) / (1 << 20)
	}
	return rep, nil
}

// call runs one call of kind, returning its status and everything in its
// result, or an error when no answer came.
func call(ctx context.Context, cs *sdk.ClientSession, kind, token string, wait time.Duration) (string, string, error) {
	k := kinds[kind]
	tool := tools[k.language]
	args := map[string]any{tool[1]: strings.ReplaceAll(k.code, "TOKEN", strconv.Quote(token))}
	if k.language == "" {
		args["global_variables"] = map[string]any{"T": token}
	}
	if k.timeout > 0 {
		args["timeout_seconds"] = k.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool[0], Arguments: args})
	if err != nil {
		return "", "", err
	}
	var text bytes.Buffer
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			text.WriteString(t.Text)
		}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	text.Write(raw)
	var sc struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(raw, &sc) != nil || sc.Status == "" {
		// A tool error without a result: the pool refused the call.
		if strings.Contains(text.String(), "busy") {
			return "busy", text.String(), nil
		}
		return "tool-error", text.String(), nil
	}
	return sc.Status, text.String(), nil
}

// killWorkers SIGKILLs one of pyrun's worker processes at random, every
// mean interval on average, until stop closes.
func killWorkers(pyrun int, mean time.Duration, r *rand.Rand, stop <-chan struct{}, kills *atomic.Int64, log io.Writer) {
	for {
		d := time.Duration(r.ExpFloat64() * float64(mean))
		select {
		case <-stop:
			return
		case <-time.After(d):
		}
		kids := procfs.Children(pyrun)
		if len(kids) == 0 {
			continue
		}
		if p, err := os.FindProcess(kids[r.IntN(len(kids))]); err == nil && p.Kill() == nil {
			kills.Add(1)
		}
	}
}

func sampleRSS(pid int, stop <-chan struct{}, peak *atomic.Int64) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if rss, err := procfs.Status(pid, "VmRSS"); err == nil && rss > peak.Load() {
			peak.Store(rss)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func hwm(pid int) int64 {
	v, _ := procfs.Status(pid, "VmHWM")
	return v
}

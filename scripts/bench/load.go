//go:build unix

package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// cpuCode spins for 50 ms of wall time, prints its token three times and
// returns it.
const cpuCode = `import time
t = time.perf_counter()
while time.perf_counter() - t < 0.05:
    pass
for _ in range(3):
    print(TOKEN)
TOKEN`

// benchThroughput runs calls of cpuCode from 8 concurrent clients of one
// session on a two-worker pool, and checks that every call got its own
// output and value.
func benchThroughput(ctx context.Context, o *opts) (*throughputReport, error) {
	p, err := startTwoWorkers(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.close()
	cpuCalls(ctx, p, 8, 16) // warm both workers
	l := cpuCalls(ctx, p, 8, o.cpuCalls)
	if len(l.errs) > 0 {
		return nil, fmt.Errorf("%d of %d calls failed; the first: %w", len(l.errs), o.cpuCalls, l.errs[0])
	}
	s := newSeries(l.ds)
	return &throughputReport{
		Calls: o.cpuCalls, Concurrency: 8, Workers: 2,
		CallsPerS: round1(float64(o.cpuCalls) / l.wall.Seconds()),
		Mixed:     l.mixed, P50MS: s.P50MS, P99MS: s.P99MS,
	}, nil
}

// cpuLoad is what cpuCalls measured.
type cpuLoad struct {
	ds    []time.Duration // each call's latency
	wall  time.Duration   // all of them
	mixed int64           // results without their own token, or with another's
	errs  []error         // calls that failed
}

// cpuCalls makes calls calls of cpuCode through p, each with a token of
// its own, from clients goroutines at once, and checks each result holds
// its own token and only it.
func cpuCalls(ctx context.Context, p *pyrunProc, clients, calls int) cpuLoad {
	var next, mixed atomic.Int64
	var mu sync.Mutex
	var l cpuLoad
	began := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(calls) {
					return
				}
				token := fmt.Sprintf("token-%06d", i)
				t0 := time.Now()
				res, err := p.call(ctx, cpuCode, map[string]any{"TOKEN": token})
				d := time.Since(t0)
				if err == nil && !ownOutput(res, token) {
					mixed.Add(1)
				}
				mu.Lock()
				l.ds = append(l.ds, d)
				if err != nil {
					l.errs = append(l.errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l.wall, l.mixed = time.Since(began), mixed.Load()
	return l
}

// ownOutput reports whether a cpuCode result holds its own token, and
// only it, in its output and return value.
func ownOutput(res *sdk.CallToolResult, token string) bool {
	sc, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return false
	}
	want := strings.Repeat(token+"\n", 3)
	return sc["stdout"] == want && sc["stderr"] == "" && sc["return_value"] == token &&
		strings.Contains(contentText(res), want)
}

// ---- --isolation process --------------------------------------------------------

// benchProcess measures --isolation process on two workers: calls per
// second from two concurrent clients for procCalls calls, and the latency
// of a call that finds a spare worker waiting.
func benchProcess(ctx context.Context, o *opts) (*processReport, error) {
	p, err := startTwoWorkers(ctx, o, "--isolation", "process")
	if err != nil {
		return nil, err
	}
	defer p.close()
	// A call that finds a spare: wait until the pool is whole each time.
	var spare []time.Duration
	for range o.runs {
		if err := p.log.waitAlive(ctx, 2); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := p.call(ctx, code, nil); err != nil {
			return nil, err
		}
		spare = append(spare, time.Since(t0))
	}
	if err := p.log.waitAlive(ctx, 2); err != nil {
		return nil, err
	}
	var next atomic.Int64
	var mu sync.Mutex
	var ds []time.Duration
	var firstErr error
	began := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for next.Add(1) <= int64(o.procCalls) {
				t0 := time.Now()
				_, err := p.call(ctx, code, nil)
				mu.Lock()
				ds = append(ds, time.Since(t0))
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)
	if firstErr != nil {
		return nil, firstErr
	}
	s, sp := newSeries(ds), newSeries(spare)
	return &processReport{
		Calls: o.procCalls, Concurrency: 2, Workers: 2,
		CallsPerS: round1(float64(o.procCalls) / wall.Seconds()),
		P50MS:     s.P50MS, P90MS: s.P90MS,
		SpareP50MS: sp.P50MS, SpareRuns: len(spare),
	}, nil
}

// ---- memory ----------------------------------------------------------------------

// benchMemory starts a two-worker pool, makes a few calls, lets it idle
// and reads the resident (RSS) and proportional (PSS: shared pages split
// between the processes that map them) set sizes of pyrun and its workers:
// every worker process there is (the client's own, the fresh ones the pool
// keeps beside it, the session worker started ahead).
func benchMemory(ctx context.Context, o *opts) (*memoryReport, error) {
	p, err := startTwoWorkers(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.close()
	for range 20 {
		if _, err := p.call(ctx, code, nil); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second) // idle, as the measurement asks
	m := &memoryReport{}
	rss, pss, err := memory(p.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	m.PyrunRSSMB, m.PyrunPSSMB = mb(rss), mb(pss)
	m.TotalRSSMB, m.TotalPSSMB = mb(rss), mb(pss)
	for _, pid := range p.workers() {
		rss, pss, err := memory(pid)
		if err != nil {
			return nil, err
		}
		m.Workers++
		m.WorkerRSSMB = append(m.WorkerRSSMB, mb(rss))
		m.TotalRSSMB = round1(m.TotalRSSMB + mb(rss))
		m.TotalPSSMB = round1(m.TotalPSSMB + mb(pss))
	}
	if m.Workers < 2 {
		return nil, fmt.Errorf("found %d worker processes, want at least the pool's 2", m.Workers)
	}
	return m, nil
}

// mb is bytes in megabytes (10^6), the unit of the targets.
func mb(b int64) float64 { return round1(float64(b) / 1e6) }

// ---- statistics ------------------------------------------------------------------

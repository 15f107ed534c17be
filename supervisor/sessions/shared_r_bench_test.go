package sessions_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// BenchmarkRSharedSessions measures R sessions as namespaces on one shared
// webR worker (docs/sessions.md) against a warm stateless call of the same
// code on the pool's worker: medians of 20 "new" sessions' first calls
// (new-ms), of calls in the session that ran last (same-ms), of calls that
// switch from another session (switch-ms), and of warm calls (warm-ms).
// The idle CPU rule is off: webR compiles R.wasm for a minute or more
// after ready on a loaded machine, and the worker must outlast it.
//
//	go test -run '^$' -bench BenchmarkRSharedSessions -benchtime 1x ./supervisor/sessions/
func BenchmarkRSharedSessions(b *testing.B) {
	ctx := context.Background()
	rt, err := supervisor.Provision(ctx, supervisor.DefaultRuntimeRoot(), os.Stderr, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	pool, err := supervisor.NewEnginePool(rt, supervisor.R, supervisor.Config{Workers: 1, StartTimeout: 4 * time.Minute, IdleCPU: 4}, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(ctx)
	m := sessions.New(sessions.Options{Instance: "bench", Anonymous: "anonymous", Log: hclog.NewNullLogger(), PerHost: 32,
		Limits: sessions.Limits{Spares: -1, Max: 64, ClientMax: 64},
		Start: func(ctx context.Context, exited func()) (sessions.Worker, error) {
			return pool.StartDedicated(ctx, exited)
		}})
	defer m.Close(ctx)
	call := func(id string) (string, time.Duration) {
		began := time.Now()
		res, err := m.Run(ctx, sessions.Call{Session: id, Job: supervisor.Job{ID: "b", Code: "v <- 1", Client: "alice"}}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess {
			b.Fatalf("session call: %v %s %s", err, res.Status, res.Error)
		}
		return res.SessionID, time.Since(began)
	}
	first, _ := call(sessions.NewSession)       // starts the session worker
	time.Sleep(20 * time.Second)                // most of webR's compile after ready
	median := func(d []time.Duration) float64 { // milliseconds
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	for range b.N {
		var warm, news, same, switching []time.Duration
		for range 20 {
			began := time.Now()
			res, err := pool.Run(ctx, supervisor.Job{ID: "w", Code: "v <- 1", Language: "r"}, nil)
			if err != nil || res.Status != supervisor.StatusSuccess {
				b.Fatalf("warm call: %v %s", err, res.Status)
			}
			warm = append(warm, time.Since(began))
		}
		var ids []string
		for range 20 {
			id, d := call(sessions.NewSession)
			news = append(news, d)
			ids = append(ids, id)
		}
		for _, id := range ids {
			_, d := call(id) // from the session before it
			switching = append(switching, d)
			_, d = call(id)
			same = append(same, d)
		}
		for _, id := range ids {
			if _, err := m.Run(ctx, sessions.Call{Session: id, End: true, Job: supervisor.Job{ID: "end", Client: "alice"}}, nil); err != nil {
				b.Fatal(err)
			}
		}
		_, _ = call(first)
		b.ReportMetric(median(warm), "warm-ms")
		b.ReportMetric(median(news), "new-ms")
		b.ReportMetric(median(same), "same-ms")
		b.ReportMetric(median(switching), "switch-ms")
	}
}

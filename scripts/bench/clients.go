//go:build unix

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
)

// clientsReport: warm calls of one client alone against two clients taking
// turns on the same two-worker pool, where each owns a worker of its own
// (docs/architecture.md, Workers belong to a client). Medians of pool.Run,
// in the same run, so that the ratios hold on a loaded machine.
type clientsReport struct {
	N       int     `json:"n"`
	AloneMS float64 `json:"alone_ms"`
	// AliceMS and BobMS: each client's calls while the two alternate.
	AliceMS float64 `json:"alternating_alice_ms"`
	BobMS   float64 `json:"alternating_bob_ms"`
	// Ratio is the worse client's median over the one alone's.
	Ratio float64 `json:"alternating_over_alone"`
	// Workers is how many workers the alternating calls ran on.
	Workers int `json:"workers"`
}

// benchClients times n warm print(1) calls of one client alone and n of
// each of two clients alternating, after warmup calls not counted.
func benchClients(ctx context.Context, rt *supervisor.Runtime, n, warmup int) (*clientsReport, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn})
	pool, err := supervisor.NewPool(rt, supervisor.Config{Workers: 2}, log)
	if err != nil {
		return nil, err
	}
	defer pool.Close(context.Background())
	if err := waitPool(ctx, pool, func(s supervisor.Stats) bool { return s.Fresh == 2 }); err != nil {
		return nil, err
	}
	ran := map[string]string{} // worker: client
	call := func(client string, i int) (time.Duration, error) {
		t0 := time.Now()
		res, err := pool.Run(ctx, supervisor.Job{ID: fmt.Sprint(i), Code: "print(1)", Client: client}, nil)
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if res.Status != supervisor.StatusSuccess || res.Stdout != "1\n" {
			return 0, fmt.Errorf("status %s, stdout %q: %s", res.Status, res.Stdout, res.Error)
		}
		if c, ok := ran[res.Worker]; ok && c != client {
			return 0, fmt.Errorf("worker %s ran calls of %s and %s", res.Worker, c, client)
		}
		ran[res.Worker] = client
		return d, nil
	}
	run := func(clients []string, count int) (map[string][]time.Duration, error) {
		ds := map[string][]time.Duration{}
		for i := range count {
			for _, c := range clients {
				d, err := call(c, i)
				if err != nil {
					return nil, err
				}
				ds[c] = append(ds[c], d)
			}
		}
		return ds, nil
	}
	if _, err := run([]string{"alice"}, warmup); err != nil {
		return nil, err
	}
	if _, err := run([]string{"alice", "bob"}, warmup); err != nil {
		return nil, err
	}
	// In rounds, alone and alternating in turn, so that a change in the
	// machine's load falls on both alike.
	alone, both := map[string][]time.Duration{}, map[string][]time.Duration{}
	const rounds = 10
	for range rounds {
		a, err := run([]string{"alice"}, max(n/rounds, 1))
		if err != nil {
			return nil, err
		}
		b, err := run([]string{"alice", "bob"}, max(n/rounds, 1))
		if err != nil {
			return nil, err
		}
		alone["alice"] = append(alone["alice"], a["alice"]...)
		for c, ds := range b {
			both[c] = append(both[c], ds...)
		}
	}
	r := &clientsReport{N: n, AloneMS: round3(ms(median(alone["alice"]))),
		AliceMS: round3(ms(median(both["alice"]))), BobMS: round3(ms(median(both["bob"]))), Workers: len(ran)}
	r.Ratio = round2(max(r.AliceMS, r.BobMS) / r.AloneMS)
	return r, nil
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
)

// ErrLanguageOff is wrapped by the error of a call in a language pyrun
// runs no pool of (--languages).
var ErrLanguageOff = errors.New("language not enabled")

// Pools are the pools of several engines, one each, seen as one runner: a
// call goes to the pool of its Job.Language. Each pool keeps its own size,
// limits and workers; what one language's calls do never holds up
// another's.
type Pools struct {
	order []string
	pools map[string]*Pool
}

// NewPools groups pools, one per engine, in the order given.
func NewPools(pools ...*Pool) (*Pools, error) {
	ps := &Pools{pools: map[string]*Pool{}}
	for _, p := range pools {
		name := p.Engine().Name()
		if ps.pools[name] != nil {
			return nil, fmt.Errorf("two pools of engine %q", name)
		}
		ps.pools[name] = p
		ps.order = append(ps.order, name)
	}
	return ps, nil
}

// JobLanguage is the language of a job: its Language, or Python.
func JobLanguage(job Job) string {
	if job.Language == "" {
		return Python.Name()
	}
	return job.Language
}

// Languages are the engines' names, in order.
func (ps *Pools) Languages() []string { return append([]string(nil), ps.order...) }

// Pool is the pool of a language, or nil.
func (ps *Pools) Pool(language string) *Pool { return ps.pools[language] }

// Run runs job on the pool of its language, as Pool.Run does.
func (ps *Pools) Run(ctx context.Context, job Job, ev Events) (Result, error) {
	lang := JobLanguage(job)
	p := ps.pools[lang]
	if p == nil {
		return Result{}, fmt.Errorf("%w: this pyrun runs %s, not %s (--languages)", ErrLanguageOff, strings.Join(ps.order, ", "), lang)
	}
	return p.Run(ctx, job, ev)
}

// Stats are the figures of every pool added up.
func (ps *Pools) Stats() Stats {
	var sum Stats
	sum.Counts = Counts{Calls: map[string]int64{}, Restarts: map[RestartKind]int64{}, Starts: map[string]int64{}}
	var errs []string
	for _, name := range ps.order {
		s := ps.pools[name].Stats()
		sum.Workers += s.Workers
		sum.Ready += s.Ready
		sum.Busy += s.Busy
		sum.Starting += s.Starting
		sum.Queued += s.Queued
		sum.Fresh += s.Fresh
		for c, n := range s.Clients {
			if sum.Clients == nil {
				sum.Clients = map[string]ClientWorkers{}
			}
			t := sum.Clients[c]
			t.Idle += n.Idle
			t.Busy += n.Busy
			sum.Clients[c] = t
		}
		if s.StartError != "" {
			errs = append(errs, name+": "+s.StartError)
		}
		sum.Counts.Rejected += s.Counts.Rejected
		addCounts(sum.Counts.Calls, s.Counts.Calls)
		addCounts(sum.Counts.Restarts, s.Counts.Restarts)
		addCounts(sum.Counts.Starts, s.Counts.Starts)
	}
	if len(ps.order) == 1 && len(errs) == 1 {
		sum.StartError = ps.pools[ps.order[0]].Stats().StartError // as the one pool says it
	} else {
		sum.StartError = strings.Join(errs, "; ")
	}
	return sum
}

// addCounts adds from's counts to to's.
func addCounts[K comparable](to, from map[K]int64) {
	for k, v := range from {
		to[k] += v
	}
}

// LanguageStats are each pool's figures, by language.
func (ps *Pools) LanguageStats() map[string]Stats {
	m := make(map[string]Stats, len(ps.pools))
	for name, p := range ps.pools {
		m[name] = p.Stats()
	}
	return m
}

// Close closes every pool, all at once, as Pool.Close does.
func (ps *Pools) Close(ctx context.Context) error {
	errs := make(chan error, len(ps.pools))
	for p := range maps.Values(ps.pools) {
		go func() { errs <- p.Close(ctx) }()
	}
	var all []error
	for range ps.pools {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

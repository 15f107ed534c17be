package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pyrun/pyrun/supervisor"
)

// ErrOtherLanguage: the id names a session of another language than the
// call's (a Python session given to run_r_code, say).
var ErrOtherLanguage = errors.New("the session belongs to another language")

// Languages are the session Managers of several languages, one each, seen
// as one: a call goes to the Manager of its Job.Language (supervisor.
// JobLanguage). Each language's sessions run on that language's workers,
// with that Manager's limits; a session id belongs to the language that
// started it, and a call of another language that names it is refused
// with ErrOtherLanguage.
type Languages struct {
	order    []string
	managers map[string]*Manager
}

// NewLanguages groups managers by language, in the order of names.
func NewLanguages(names []string, managers []*Manager) (*Languages, error) {
	if len(names) != len(managers) {
		return nil, fmt.Errorf("sessions: %d languages, %d managers", len(names), len(managers))
	}
	l := &Languages{managers: map[string]*Manager{}}
	for i, n := range names {
		if l.managers[n] != nil {
			return nil, fmt.Errorf("sessions: two managers of language %q", n)
		}
		l.managers[n] = managers[i]
		l.order = append(l.order, n)
	}
	return l, nil
}

// Manager is the Manager of a language, or nil.
func (l *Languages) Manager(language string) *Manager { return l.managers[language] }

// Run runs a call in a session of its language, as Manager.Run does.
func (l *Languages) Run(ctx context.Context, c Call, ev supervisor.Events) (supervisor.Result, error) {
	lang := supervisor.JobLanguage(c.Job)
	m := l.managers[lang]
	if m == nil {
		return supervisor.Result{}, fmt.Errorf("%w: this pyrun keeps sessions of %s, not %s (--languages)",
			supervisor.ErrLanguageOff, strings.Join(l.order, ", "), lang)
	}
	res, err := m.Run(ctx, c, ev)
	if errors.Is(err, ErrUnknown) {
		for _, other := range l.order {
			if other != lang && l.managers[other].Knows(c.Session, c.Job.Client) {
				return res, fmt.Errorf("%w: session %q was started in %s, not %s: continue it with the %s tool, or start a new %s session with session_id %q",
					ErrOtherLanguage, clip(c.Session, 80), other, lang, other, lang, NewSession)
			}
		}
	}
	return res, err
}

// Stats are the figures of every language's sessions added up; Limits
// are the first language's.
func (l *Languages) Stats() Stats {
	sum := Stats{Ends: map[string]int64{}}
	for i, n := range l.order {
		s := l.managers[n].Stats()
		if i == 0 {
			sum.Limits = s.Limits
		}
		sum.Open += s.Open
		sum.Starting += s.Starting
		sum.Starts += s.Starts
		sum.StartFailures += s.StartFailures
		for k, v := range s.Ends {
			sum.Ends[k] += v
		}
	}
	return sum
}

// SetLimits applies new limits to every language's sessions.
func (l *Languages) SetLimits(lim Limits) {
	for _, m := range l.managers {
		m.SetLimits(lim)
	}
}

// Close ends every language's sessions, as Manager.Close does.
func (l *Languages) Close(ctx context.Context) error {
	var errs []error
	for _, n := range l.order {
		if err := l.managers[n].Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s sessions: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Knows says whether id names a session of client's here, open or ended.
func (m *Manager) Knows(id, client string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.open[id]; s != nil {
		return owns(s.owner, client)
	}
	t, ok := m.gone[id]
	return ok && owns(t.owner, client)
}

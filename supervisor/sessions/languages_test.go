package sessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/syncbuf"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// A session belongs to the language that started it: a call of another
// language naming it is refused, saying whose it is, and the session
// goes on.
func TestLanguagesRefuseAnotherLanguagesSession(t *testing.T) {
	py, _ := manager(t, sessions.Limits{})
	other, _ := manager(t, sessions.Limits{})
	langs, err := sessions.NewLanguages([]string{"python", "r"}, []*sessions.Manager{py, other})
	if err != nil {
		t.Fatal(err)
	}
	res, err := langs.Run(t.Context(), sessions.Call{Session: sessions.NewSession,
		Job: supervisor.Job{ID: "1", Code: "x = 41", Client: "anonymous", Language: "python"}}, nil)
	if err != nil || res.SessionID == "" {
		t.Fatalf("new session: %v %v", res.Status, err)
	}
	id := res.SessionID
	_, err = langs.Run(t.Context(), sessions.Call{Session: id,
		Job: supervisor.Job{ID: "2", Code: "x", Client: "anonymous", Language: "r"}}, nil)
	if !errors.Is(err, sessions.ErrOtherLanguage) || !strings.Contains(err.Error(), "was started in python, not r") {
		t.Fatalf("r call in a python session: %v, want ErrOtherLanguage", err)
	}
	// Another client does not learn that the id exists.
	_, err = langs.Run(t.Context(), sessions.Call{Session: id,
		Job: supervisor.Job{ID: "3", Code: "x", Client: "mallory", Language: "r"}}, nil)
	if !errors.Is(err, sessions.ErrUnknown) {
		t.Errorf("another client's r call: %v, want ErrUnknown", err)
	}
	res, err = langs.Run(t.Context(), sessions.Call{Session: id,
		Job: supervisor.Job{ID: "4", Code: "x + 1", Client: "anonymous"}}, nil)
	if err != nil || res.Value != "42" {
		t.Fatalf("the python session after the refusal: %q %v", res.Value, err)
	}
	_, err = langs.Run(t.Context(), sessions.Call{Session: sessions.NewSession,
		Job: supervisor.Job{ID: "5", Code: "1", Client: "anonymous", Language: "javascript"}}, nil)
	if !errors.Is(err, supervisor.ErrLanguageOff) {
		t.Errorf("javascript session: %v, want ErrLanguageOff", err)
	}
	if s := langs.Stats(); s.Open != 1 || s.Starts != 1 {
		t.Errorf("stats: %d open, %d started; want 1 and 1", s.Open, s.Starts)
	}
}

// stubWorker is a session's worker that runs nothing and is never lost.
type stubWorker struct{}

func (stubWorker) Run(context.Context, supervisor.Job, supervisor.Events) (supervisor.Result, error) {
	return supervisor.Result{Status: supervisor.StatusSuccess}, nil
}
func (stubWorker) Lost() string    { return "" }
func (stubWorker) TryLost() string { return "" }
func (stubWorker) Current() bool   { return true }
func (stubWorker) Close()          {}
func (stubWorker) Kill(string)     {}
func (stubWorker) Checkpoint(context.Context, func(*supervisor.Image) error) error {
	return supervisor.ErrNotDurable
}
func (stubWorker) CheckpointSince(context.Context, string, func(*supervisor.Image) error) error {
	return supervisor.ErrNotDurable
}

// A Manager's errors name its language, and still wrap the conditions
// callers test; one given no language names Python's.
func TestErrorsNameTheLanguage(t *testing.T) {
	for lang, word := range map[string]string{"R": "R", "JavaScript": "JavaScript", "": "Python"} {
		m := sessions.New(sessions.Options{
			Instance: "test-1", Language: lang, Limits: sessions.Limits{Max: 1, Spares: -1},
			Start: func(context.Context, func()) (sessions.Worker, error) { return stubWorker{}, nil },
		})
		run := func(id string) error {
			_, err := m.Run(t.Context(), sessions.Call{Session: id, Job: supervisor.Job{ID: "1", Code: "1", Client: "anonymous"}}, nil)
			return err
		}
		if err := run("test-1.nope"); !errors.Is(err, sessions.ErrUnknown) ||
			err.Error() != `unknown `+word+` session: no `+word+` session "test-1.nope" is open here` {
			t.Errorf("%q: unknown id: %v", lang, err)
		}
		if err := run(sessions.NewSession); err != nil {
			t.Fatalf("%q: new session: %v", lang, err)
		}
		if err := run(sessions.NewSession); !errors.Is(err, sessions.ErrTooMany) ||
			!strings.HasPrefix(err.Error(), "too many "+word+" sessions: 1 are open") {
			t.Errorf("%q: a second session past max 1: %v", lang, err)
		}
		if err := m.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := run(sessions.NewSession); !errors.Is(err, sessions.ErrClosed) ||
			err.Error() != "pyrun is shutting down; its "+word+" sessions have ended" {
			t.Errorf("%q: after Close: %v", lang, err)
		}
	}
	if got := sessions.ErrLost.Error(); got != "the session was lost" {
		t.Errorf("ErrLost says %q", got)
	}
}

// A Manager's log lines say "session", never "python session", whatever
// its language: an R session's start and end were logged as a Python
// session's.
func TestLogLinesDoNotCallEverySessionPython(t *testing.T) {
	var buf syncbuf.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "r.sessions", Output: &buf, Level: hclog.Trace})
	m := sessions.New(sessions.Options{
		Instance: "test-1", Language: "R", Limits: sessions.Limits{Max: 2, Spares: -1}, Log: log,
		Start: func(context.Context, func()) (sessions.Worker, error) { return stubWorker{}, nil },
	})
	res, err := m.Run(t.Context(), sessions.Call{Session: sessions.NewSession, Job: supervisor.Job{ID: "1", Code: "1", Client: "anonymous"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(t.Context(), sessions.Call{Session: res.SessionID, End: true, Job: supervisor.Job{ID: "2", Client: "anonymous"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"session started: session_id=" + res.SessionID, "session ended: session_id=" + res.SessionID} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(strings.ToLower(out), "python") {
		t.Errorf("an R session's log names Python:\n%s", out)
	}
}

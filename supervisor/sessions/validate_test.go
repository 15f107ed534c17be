package sessions_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// The sessions' limits check what a user set, zero included, naming each
// setting as the flag is called.
func TestLimitsValidate(t *testing.T) {
	good := sessions.Limits{Idle: sessions.DefaultIdle, MaxAge: sessions.DefaultMaxAge, Max: 4, ClientMax: 2, MaxHosts: 4}
	if err := good.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*sessions.Limits)
		want string
	}{
		{func(l *sessions.Limits) { l.Idle = 0 }, "session-idle must be positive, not 0s"},
		{func(l *sessions.Limits) { l.MaxAge = -time.Second }, "session-max-age must be positive, not -1s"},
		{func(l *sessions.Limits) { l.Max = 0 }, "max-sessions must be between 1 and 4096, not 0"},
		{func(l *sessions.Limits) { l.ClientMax = 5000 }, "client-max-sessions must be between 1 and 4096, not 5000"},
		{func(l *sessions.Limits) { l.MaxHosts = 0 }, "max-session-workers must be between 1 and 256, not 0"},
		{func(l *sessions.Limits) { l.ClientMaxHosts = -1 }, "client-max-session-workers must be between 0 and 256, not -1"},
		{func(l *sessions.Limits) { l.Spares = 17 }, "session-spares must be between 0 and 16, not 17"},
	} {
		l := good
		c.set(&l)
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", l, err, c.want)
		}
	}
}

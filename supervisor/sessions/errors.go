package sessions

import (
	"fmt"
	"strings"

	"github.com/pyrun/pyrun/supervisor"
)

// The conditions a call to a session can fail on, before or instead of
// running. Each error a Manager returns wraps one, names the Manager's
// language ("unknown R session") and says what happened to that session.
var (
	// ErrUnknown: no session of that id is known here, or it belongs to
	// another client (who cannot tell the two apart).
	ErrUnknown = condition("unknown %ssession")
	// ErrEnded: the session was ended by its client.
	ErrEnded = condition("the %ssession has ended")
	// ErrExpired: the session was idle too long or reached its maximum age.
	ErrExpired = condition("the %ssession has expired")
	// ErrLost: the session's worker was killed or died, and its state with it.
	ErrLost = condition("the %ssession was lost")
	// ErrTooMany: a new session would pass --max-sessions or
	// --client-max-sessions.
	ErrTooMany = condition("too many %ssessions")
	// ErrOtherInstance: the id names a session of another pyrun instance.
	ErrOtherInstance = condition("the %ssession belongs to another pyrun instance")
	// ErrClosed: pyrun is shutting down.
	ErrClosed = condition("pyrun is shutting down; its %ssessions have ended")
	// ErrStart: no worker could be started for the new session.
	ErrStart = condition("no worker could be started for the %ssession")
	// ErrNoRoom: the session must be restored from its checkpoint onto a
	// worker of its own, and Limits.MaxHosts are running; it stays, with
	// its checkpoint, for a later call.
	ErrNoRoom = condition("no session worker is free to restore the %ssession")
)

// condition is an ErrXxx: its words, with a %s where the language's name
// goes (followed by a space), which its own Error leaves out.
type condition string

func (c condition) Error() string { return fmt.Sprintf(string(c), "") }

// sessionError is an error of a condition, worded for a Manager's
// language.
type sessionError struct {
	cond condition
	msg  string
}

func (e *sessionError) Error() string { return e.msg }
func (e *sessionError) Unwrap() error { return e.cond }

// Reasons a session ends, as Stats.Ends counts them and logs say.
const (
	EndClient   = "ended"    // end_session
	EndIdle     = "idle"     // no call for Limits.Idle
	EndMaxAge   = "max-age"  // older than Limits.MaxAge
	EndLost     = "lost"     // its worker was killed or died
	EndShutdown = "shutdown" // pyrun stopped
	// EndIdleCPU: its code kept using more CPU between calls than
	// --idle-cpu allows (a task or timer left running), and its worker was
	// killed (supervisor.LostIdleCPU).
	EndIdleCPU = "idle-cpu"
)

// EndReasons lists every end reason, for metrics.
var EndReasons = []string{EndClient, EndIdle, EndMaxAge, EndLost, EndShutdown, EndIdleCPU}

// lostReason is the end reason of a session whose worker was lost for why.
func lostReason(why string) string {
	if strings.HasPrefix(why, supervisor.LostIdleCPU) {
		return EndIdleCPU
	}
	return EndLost
}

package supervisor

import "time"

// Worker stderr is re-logged under the worker's name, but Python code can
// write to it as fast as it likes (js.console.log in a loop), and pyrun's
// log must not become the flood. A worker may log a burst of
// stderrBurst lines, then stderrRate lines a second; what is held back is
// counted and reported. The last lines are always kept for the error when a
// worker dies (tailBuffer).
const (
	stderrBurst = 200
	stderrRate  = 20
)

// lineLimiter is a token bucket for one worker's stderr lines. It is used
// by the goroutine that reads that stderr only.
type lineLimiter struct {
	tokens  float64
	last    time.Time
	dropped int // lines held back since the last report
}

func newLineLimiter() *lineLimiter {
	return &lineLimiter{tokens: stderrBurst, last: time.Now()}
}

// allow reports whether a line may be logged now. When it may after some
// were held back, held is how many.
func (l *lineLimiter) allow(now time.Time) (ok bool, held int) {
	l.tokens = min(stderrBurst, l.tokens+now.Sub(l.last).Seconds()*stderrRate)
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	held, l.dropped = l.dropped, 0
	return true, held
}

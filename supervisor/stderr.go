package supervisor

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Worker stderr is re-logged under the worker's name, but Python code can
// write to it as fast as it likes (js.console.log in a loop, os.write(2)),
// and pyrun's log must not become the flood, nor carry what the code wants
// a terminal to do. So what is logged is bounded in bytes twice: per call
// (what a worker writes during a call and until the next, so a new worker
// per call, --isolation process, gains nothing), and per second for the
// whole pool, however many workers write. Each line is cut at
// stderrLineMax, control characters are escaped, and what is held back is
// counted and reported once per call. The last lines are always kept (also
// escaped) for the error when a worker dies (tailBuffer).
const (
	// DefaultStderrLogPerCall and DefaultStderrLogRate are the defaults of
	// Config.StderrLogPerCall and Config.StderrLogRate.
	DefaultStderrLogPerCall = 16 << 10
	DefaultStderrLogRate    = 64 << 10
	// stderrLineMax cuts one logged line.
	stderrLineMax = 2 << 10
	// stderrLineCost is what a line costs besides its bytes: the log
	// record around it, so a flood of empty lines is bounded too.
	stderrLineCost = 64
)

// stderrBudget is the pool's allowance for logging worker stderr: a token
// bucket of bytes shared by all workers (burst: two seconds' worth), and
// the per-call limit. Safe for concurrent use.
type stderrBudget struct {
	mu      sync.Mutex
	rate    float64 // bytes a second
	perCall int
	tokens  float64
	last    time.Time
}

func newStderrBudget(cfg Config) *stderrBudget {
	b := &stderrBudget{last: time.Now()}
	b.set(cfg)
	b.tokens = 2 * b.rate
	return b
}

// set applies a (re)configuration.
func (b *stderrBudget) set(cfg Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rate = float64(cfg.StderrLogRate)
	b.perCall = cfg.StderrLogPerCall
}

// take spends n bytes if the pool has them now.
func (b *stderrBudget) take(n int, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(2*b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

func (b *stderrBudget) callLimit() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.perCall
}

// stderrLimiter decides, for one worker's stderr, which lines are logged.
// It is used by the goroutine that reads that stderr only.
type stderrLimiter struct {
	pool     *stderrBudget
	call     int64 // the call the counts below belong to
	used     int   // bytes logged for this call
	held     int   // lines held back for this call
	heldSize int
}

// allow reports whether a line (escaped and cut) may be logged now, call
// being the number of calls the worker has started. report, when not
// empty, is to be logged first: what was held back of the previous call.
func (l *stderrLimiter) allow(line string, call int64, now time.Time) (ok bool, report string) {
	if call != l.call {
		report = l.flush()
		l.call, l.used = call, 0
	}
	cost := len(line) + stderrLineCost
	if l.used+cost > l.pool.callLimit() || !l.pool.take(cost, now) {
		l.held++
		l.heldSize += len(line)
		return false, report
	}
	l.used += cost
	return true, report
}

// flush is the report of what was held back since the last one, or "".
func (l *stderrLimiter) flush() string {
	if l.held == 0 {
		return ""
	}
	s := fmt.Sprintf("worker stderr not logged: %d lines, %d bytes, past the limits of %d bytes per call and %d bytes a second for all workers",
		l.held, l.heldSize, l.pool.callLimit(), int(l.pool.rate))
	l.held, l.heldSize = 0, 0
	return s
}

// escapeLine makes a stderr line safe for a text log: control characters
// (C0 but tab, DEL, C1: carriage returns, ANSI escapes, BEL), Unicode's
// bidirectional overrides and bytes that are not UTF-8 become \x.. or
// \u.... escapes, and the line is cut at max bytes.
func escapeLine(s string, max int) string {
	clean := len(s) <= max
	for i := 0; clean && i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			clean = false
		}
	}
	if clean {
		return s // plain ASCII: the common case, without a copy
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if b.Len() >= max {
			fmt.Fprintf(&b, "...[%d bytes cut]", len(s)-i)
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 && r != '\t', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

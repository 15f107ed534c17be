package supervisor

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// lockedBuffer is a log output safe for the call log's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every call's line is written: those queued by close, those past a full
// queue at once, and those after close at once.
func TestCallLogWritesEveryLine(t *testing.T) {
	var out lockedBuffer
	c := newCallLog(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info}))
	const n = 3 * callLogQueue // more than the queue holds
	for i := range n {
		c.add("id", i)
	}
	c.close()
	c.add("id", "late")
	c.close() // twice is fine
	text := out.String()
	if got := strings.Count(text, "call: id="); got != n+1 {
		t.Fatalf("%d call lines, want %d", got, n+1)
	}
	if !strings.Contains(text, "id=late") {
		t.Error("the line added after close is missing")
	}
}

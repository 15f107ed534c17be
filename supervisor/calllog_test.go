package supervisor

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Every call's line is written: those queued by close, those past a full
// queue at once, and those after close at once. (hclog serialises its
// writes, and out is read only after close has waited for the goroutine.)
func TestCallLogWritesEveryLine(t *testing.T) {
	var out bytes.Buffer
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

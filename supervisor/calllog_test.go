package supervisor

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

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

// A call's line has its keys in one order, wherever it is made, and only
// those set.
func TestCallLineArgs(t *testing.T) {
	job := Job{ID: "c1", Session: "s", Client: "alice", TraceID: "t", SpanID: "sp"}
	ran, waited := 1500*time.Microsecond+400*time.Nanosecond, 2*time.Millisecond // rounded to µs
	for _, tc := range []struct {
		line CallLine
		want string
	}{
		{CallLine{Status: "success", Duration: &ran, Queued: &waited, Worker: "worker-1", SessionID: "box-1.ab"},
			"id=c1 status=success duration=1.5ms queued=2ms worker=worker-1 session=s session_id=box-1.ab client=alice trace_id=t span_id=sp"},
		{CallLine{Status: "rejected", Queued: &waited, Err: errors.New("queue full")},
			`id=c1 status=rejected queued=2ms worker="" session=s client=alice error="queue full" trace_id=t span_id=sp`},
	} {
		var out bytes.Buffer
		hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info, DisableTime: true}).Info("call", tc.line.Args(job)...)
		if got := strings.TrimSpace(strings.TrimPrefix(out.String(), "[INFO]  call: ")); got != tc.want {
			t.Errorf("line\n%s\nwant\n%s", got, tc.want)
		}
	}
}

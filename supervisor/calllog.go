package supervisor

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// callLog writes the pool's per-call log line ("call") on a goroutine of
// its own, once the call has returned: formatting it was 10% of pyrun's
// CPU in the warm stdio profile (JSON logs), which a warm call waited for. The
// queue is bounded; when it is full, or closed, the line is written at once,
// so a burst costs latency, never memory or lines.
type callLog struct {
	log  hclog.Logger
	mu   sync.Mutex
	ch   chan []any // guarded by mu for sends and close
	done chan struct{}
	shut bool
}

// callLogQueue is how many lines may wait to be written.
const callLogQueue = 256

func newCallLog(log hclog.Logger) *callLog {
	c := &callLog{log: log, ch: make(chan []any, callLogQueue), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *callLog) run() {
	defer close(c.done)
	for args := range c.ch {
		c.log.Info("call", args...)
	}
}

// add logs a call's line with args, later or now.
func (c *callLog) add(args ...any) {
	c.mu.Lock()
	if !c.shut {
		select {
		case c.ch <- args:
			c.mu.Unlock()
			return
		default:
		}
	}
	c.mu.Unlock()
	c.log.Info("call", args...)
}

// close writes the lines still queued and stops the goroutine; later lines
// are written at once.
func (c *callLog) close() {
	c.mu.Lock()
	if !c.shut {
		c.shut = true
		close(c.ch)
	}
	c.mu.Unlock()
	<-c.done
}

// CallLine is what a call's log line ("call") says besides its job's id,
// session, client and trace. Every such line (the pool's, a dedicated
// worker's, the sessions', the front end's client limits') is made by
// Args, so that they all have the same keys in the same order.
type CallLine struct {
	Status string
	// Duration, when set, is how long the call ran; Queued, when set, how
	// long it waited for a worker or for its client's turn.
	Duration, Queued *time.Duration
	// Worker is the worker that ran the call; "" (on the line too) when
	// none did.
	Worker string
	// SessionID is the Python session the call ran in or asked for; "":
	// left out.
	SessionID string
	// Err is why the call did not run; nil: left out.
	Err error
}

// Args is the line's key-value pairs for job: id, status, duration,
// queued, worker, session, session_id, client, error, then the trace's
// (Job.LogTrace); those not set are left out.
func (l CallLine) Args(job Job) []any {
	args := make([]any, 0, 22)
	args = append(args, "id", job.ID, "status", l.Status)
	if l.Duration != nil {
		args = append(args, "duration", l.Duration.Round(time.Microsecond))
	}
	if l.Queued != nil {
		args = append(args, "queued", l.Queued.Round(time.Microsecond))
	}
	args = append(args, "worker", l.Worker, "session", job.Session)
	if l.SessionID != "" {
		args = append(args, "session_id", l.SessionID)
	}
	args = append(args, "client", job.Client)
	if l.Err != nil {
		args = append(args, "error", l.Err.Error())
	}
	return job.LogTrace(args...)
}

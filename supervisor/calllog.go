package supervisor

import (
	"sync"

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

package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// conn speaks the worker protocol (docs/protocol.md) over a
// process's pipes, as go-plugin's Client does over its Runner: the ready
// handshake, the requests it writes to stdin, and the events it reads from
// stdout, which one goroutine (readEvents, the process's stdout reader)
// queues for the call that is running. A worker runs one call at a time
// (the pool sees to that), so everything but events, richQueued and the
// process is owned by the goroutine running a call, or the one that hands
// the worker on.
type conn struct {
	proc    *process
	maxLine int // bound of an event line (maxEventLine)
	// maxCheckpoint bounds a checkpoint's bytes (Config.MaxCheckpoint).
	maxCheckpoint int64

	events chan event // from readEvents; closed when stdout ends or breaks
	// richQueued holds a token for each display or file event in events:
	// readEvents queues at most richQueue of them (each up to a MiB of
	// data), however fast a worker writes them; the call that takes one
	// gives its token back (tookRich).
	richQueued chan struct{}
	readErr    error // why events closed; written before the close

	ready event // the worker's ready announcement

	interrupts int // SIGUSR2 signals sent so far, told to the worker with each call
	// unsettled: the call whose result came but whose "idle" has not
	// (settle); "": none.
	unsettled string
	// recycle: the worker said, with its last idle, that it could not set
	// its engine back after a stateless call (docs/protocol.md, Idle); it serves
	// no other call.
	recycle retirement
}

// maxEventLine bounds a line from a worker: the largest legitimate line is a
// result carrying a capped return value and traceback, each at most
// MaxOutput characters, JSON-escaped.
// A display or file event carries at most 1 MiB in base64 (larger ones
// are split over several events).
func maxEventLine(cfg Config) int { return max(16*cfg.MaxOutput, 1<<20) + 1<<20 }

func newConn(cfg Config) *conn {
	return &conn{
		maxLine:       maxEventLine(cfg),
		maxCheckpoint: cfg.withDefaults().MaxCheckpoint,
		events:        make(chan event, 64),
		richQueued:    make(chan struct{}, richQueue),
	}
}

// awaitReady waits for the worker's ready announcement and checks it.
func (c *conn) awaitReady(ctx context.Context, limit time.Duration) error {
	ev, err := c.awaitStart(ctx, limit, "ready")
	if err != nil {
		return err
	}
	if ev.Protocol != protocolVersion {
		return fmt.Errorf("worker speaks protocol %d, pyrun speaks %d", ev.Protocol, protocolVersion)
	}
	c.ready = ev
	return nil
}

// awaitStart waits for the worker's first event, which must be of type want
// ("ready", or "parked": parked.go).
func (c *conn) awaitStart(ctx context.Context, limit time.Duration, want string) (event, error) {
	p := c.proc
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case ev, ok := <-c.events:
		if !ok {
			<-p.exited
			err := fmt.Errorf("worker exited before it was %s (%s)%s", want, p.exitDescription(), p.stderrSuffix())
			if !p.killedFor().given() && p.signaled() == syscall.SIGKILL {
				err = fmt.Errorf("%w: %w", errKilledStarting, err)
			}
			return event{}, err
		}
		if ev.Type != want {
			return event{}, fmt.Errorf("worker said %q before it was %s%s", ev.Type, want, p.stderrSuffix())
		}
		return ev, nil
	case <-timer.C:
		return event{}, fmt.Errorf("worker not %s after %s%s", want, limit, p.stderrSuffix())
	case <-ctx.Done():
		return event{}, fmt.Errorf("start worker: %w", ctx.Err())
	}
}

// readEvents reads p's stdout into events until it ends. A worker that
// speaks garbage is killed, not trusted.
func (c *conn) readEvents(p *process, r io.ReadCloser) {
	defer r.Close()
	defer close(c.events)
	er := newEventReader(r, c.maxLine)
	for {
		ev, err := er.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.readErr = err
				// Drain what it still writes so it never blocks.
				p.kill(retireProtocol)
				_, _ = io.Copy(io.Discard, r)
			}
			return
		}
		if ev.Type == "checkpoint" {
			// Its bytes follow the line: the call that asked for it reads
			// them from the pipe as they come, and nothing else is read
			// until it is done with them (checkpoint.go).
			if err := c.passBlob(p, r, er, ev); err != nil {
				c.readErr = err
				p.kill(retireProtocol)
				_, _ = io.Copy(io.Discard, r)
				return
			}
			continue
		}
		if ev.Type == "display" || ev.Type == "file" {
			select {
			case c.richQueued <- struct{}{}:
			case <-p.killed:
				continue // nobody takes it: read on to the end
			}
		}
		c.events <- ev
	}
}

// richQueue bounds the display and file events waiting for their call to
// take them, per worker: at most richQueue MiB of data decoded and held.
const richQueue = 4

// tookRich gives back the token of a display or file event the call took.
func (c *conn) tookRich() {
	select {
	case <-c.richQueued:
	default:
	}
}

// answerWriteLimit bounds the write of a line to a worker that is waiting
// to read it (an answer, a warming request).
const answerWriteLimit = 5 * time.Second

// send writes one request line to the worker, within limit. A worker that
// reads requests one at a time gets each whole: writes to one os.File are
// serialised.
func (c *conn) send(req any, limit time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_ = c.proc.stdin.SetWriteDeadline(time.Now().Add(limit))
	_, err = c.proc.stdin.Write(append(b, '\n'))
	return err
}

// warmRequest lets a fresh worker run n of its warming calls now (docs/protocol.md,
// Warming calls).
type warmRequest struct {
	Type  string `json:"type"`
	Calls int    `json:"calls"`
}

// warm lets a worker that has had no call run n of its warming calls. A
// worker that does not take the line is killed: the health check or the
// next call finds it gone.
func (c *conn) warm(n int) {
	if err := c.send(warmRequest{Type: "warm", Calls: n}, answerWriteLimit); err != nil {
		c.proc.kill(retirement{RestartProtocol, "it did not accept a request"})
	}
}

// writeAnswer writes an answer the worker is waiting for (tool_result).
func (c *conn) writeAnswer(ans request) error {
	if c.proc.killedFor().given() {
		return errors.New("the worker was killed")
	}
	return c.send(ans, answerWriteLimit)
}

// interruptRepeat is how often an interrupted call that has not ended is
// interrupted again during its grace period. Pyodide clears its interrupt
// flag with a read and a separate write, so a signal that lands between the
// two is lost (seen in about one in twenty interrupts of a busy loop).
const interruptRepeat = 100 * time.Millisecond

// interrupt asks the running call to stop: KeyboardInterrupt in Python.
func (c *conn) interrupt() {
	c.interrupts++
	if err := c.proc.cmd.Process.Signal(interruptSignal); err != nil {
		c.proc.kill(retirement{RestartInterrupt, "it could not be interrupted"})
	}
}

// settle waits for the worker to say "idle" after its last call's result:
// it cleans up after a call (fresh globals, files and modules for the
// next) once the result is out, so that the caller does not wait for
// that, and reads no request before it is done; an idle with recycle
// retires it (stale). Clean-up can run the
// call's own code (finalizers), so it gets no longer than a call, and a
// worker that takes longer, or says anything else, is killed: the next
// call goes to another worker, not charged for this one's leftovers.
func (c *conn) settle(limit time.Duration) error {
	id := c.unsettled
	c.unsettled = ""
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case ev, ok := <-c.events:
		switch {
		case !ok:
			return errors.New("the worker exited while it cleaned up after a call")
		case ev.Type == "idle" && ev.ID == id:
			c.tookIdle(ev)
			return nil
		}
		c.proc.kill(retireProtocol)
		return fmt.Errorf("%w: %q for call %q while it cleaned up after call %q", errGarbage, ev.Type, ev.ID, id)
	case <-timer.C:
		c.proc.kill(retireSettle)
		return fmt.Errorf("the worker did not clean up after call %s within %s", id, limit)
	}
}

// stale says why a worker between calls cannot take one, or nothing when
// it can: it died, the supervisor killed it, or it wrote an event with no
// call running (a late line from a call that forged its own result). The
// idle that ends the last call's clean-up (settle) is taken.
func (c *conn) stale() retirement {
	p := c.proc
	if k := p.killedFor(); k.given() {
		return k
	}
	if c.recycle.given() {
		return c.recycle
	}
	select {
	case ev, ok := <-c.events:
		if !ok {
			return retireExited
		}
		if c.unsettled != "" && ev.Type == "idle" && ev.ID == c.unsettled {
			c.unsettled = ""
			c.tookIdle(ev)
			return c.stale()
		}
		p.log.Warn("worker spoke while idle", "type", ev.Type, "id", ev.ID)
		p.kill(retireProtocol)
		return retireProtocol
	case <-p.exited:
		return retireExited
	default:
		return retirement{}
	}
}

// tookIdle notes an idle's recycle: why the worker must serve no other call.
func (c *conn) tookIdle(ev event) {
	if ev.Recycle != "" {
		c.recycle = retirement{RestartRecycle, ev.Recycle}
	}
}

// neverRead reports whether the last n bytes written to the worker's stdin,
// a call's request line, are all still in the pipe: the worker, now gone,
// never read the call.
func (c *conn) neverRead(n int) bool {
	unread, err := unreadBytes(c.proc.stdin)
	if err != nil {
		c.proc.log.Debug("cannot tell whether the worker read its call", "error", fmt.Sprint(err))
		return false
	}
	return unread >= n
}

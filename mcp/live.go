package mcp

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/supervisor"
)

// Live runs. While a call runs, what it writes reaches the calling session
// as MCP log messages (notifications/message), and, when the request carries
// a progress token, notifications/progress report its place in line and then
// its running time. The pool hands output over on the goroutine that reads
// the worker, which must never wait for a client: a live keeps it in a
// bounded buffer, and one goroutine of its own sends it.

// flushInterval is the longest output waits before it is sent, and the
// shortest gap between two sends: output written faster goes out in batches.
const flushInterval = 100 * time.Millisecond

// entryCost is what one buffered entry costs besides its text, for the
// buffer's bound.
const entryCost = 64

// LogLogger is the logger field of every log message pyrun sends a client.
const LogLogger = "pyrun"

// LogData is the data of a log message about a call.
type LogData struct {
	// CallID is pyrun's id of the call, the id in pyrun's own logs.
	CallID string `json:"call_id"`
	// ProgressToken is the call's progress token, when it has one: the
	// client's own handle on the request.
	ProgressToken any `json:"progress_token,omitempty"`
	// Stream is "stdout" (level info), "stderr" (warning), "packages"
	// (debug: package loading) or "pyrun" (notice or error: what pyrun did).
	Stream string `json:"stream"`
	// Text is the output exactly as written (stdout, stderr), or lines.
	Text string `json:"text"`
}

// kind is what an entry of the live buffer holds.
type kind uint8

const (
	kindStdout kind = iota
	kindStderr
	kindPackage
	kindNotice
	kindSevere
	kindGap // output dropped because the client reads too slowly
)

var kindLevel = [...]sdk.LoggingLevel{
	kindStdout: "info", kindStderr: "warning", kindPackage: "debug",
	kindNotice: "notice", kindSevere: "error", kindGap: "notice",
}

var kindStream = [...]string{
	kindStdout: "stdout", kindStderr: "stderr", kindPackage: "packages",
	kindNotice: "pyrun", kindSevere: "pyrun", kindGap: "pyrun",
}

type entry struct {
	kind kind
	text []byte
	lost int // kindGap: bytes dropped
}

// LiveOptions bound what a call sends while it runs. The zero value of each
// field means its default.
type LiveOptions struct {
	// Buffer bounds the output waiting to be sent to one call's client, in
	// bytes; output written while it is full is not sent live (the result
	// still has it), and a notice says how much was left out. 0: 256 KiB.
	Buffer int
	// ProgressInterval is the gap between two progress notifications of a
	// call, while it waits and while it runs. 0: 1s.
	ProgressInterval time.Duration
}

func (o LiveOptions) withDefaults() LiveOptions {
	if o.Buffer <= 0 {
		o.Buffer = 256 << 10
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	return o
}

// live forwards one call's output and progress to the session that made it.
// Its supervisor.Watcher methods only buffer and never block; its own
// goroutine, stopped by close, does the sending.
type live struct {
	ctx   context.Context // the request's: on Streamable HTTP it routes notifications to the request's stream
	ss    *sdk.ServerSession
	id    string
	token any // progress token; nil for none
	opts  LiveOptions
	log   hclog.Logger
	began time.Time

	mu       sync.Mutex
	pending  []entry
	spare    []entry // the last batch's slice, reused
	size     int     // bytes held in pending, entryCost included
	written  int64   // output bytes so far
	position func() int
	started  time.Time // zero until a worker took the call

	wake  chan struct{} // output is waiting
	moved chan struct{} // the call left the line
	stop  chan struct{}
	done  chan struct{}

	// Owned by the sending goroutine.
	progress float64 // the last progress sent
	broken   bool    // a send failed: the client is gone
}

var _ supervisor.Watcher = (*live)(nil)

// newLive starts forwarding for the call id made on ss. Call close when
// the call is over, before its result is returned.
func newLive(ctx context.Context, ss *sdk.ServerSession, id string, token any, opts LiveOptions, log hclog.Logger) *live {
	l := &live{
		ctx: ctx, ss: ss, id: id, token: token, opts: opts.withDefaults(), log: log, began: time.Now(),
		wake:  make(chan struct{}, 1),
		moved: make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go l.loop()
	return l
}

// close sends what is still buffered and stops the sending goroutine.
func (l *live) close() {
	close(l.stop)
	<-l.done
}

func (l *live) Output(c supervisor.Chunk) {
	k := kindStdout
	if c.Stream == supervisor.Stderr {
		k = kindStderr
	}
	l.add(k, c.Text, true)
}

func (l *live) Package(text string) { l.add(kindPackage, text+"\n", true) }

// Notice is never dropped: a call gets a handful at most.
func (l *live) Notice(n supervisor.Notice) {
	k := kindNotice
	if n.Severe {
		k = kindSevere
	}
	l.add(k, n.Text+"\n", false)
}

func (l *live) Queued(position func() int) {
	l.mu.Lock()
	l.position = position
	l.mu.Unlock()
	l.signal(l.moved)
}

func (l *live) Started(string) {
	l.mu.Lock()
	l.started = time.Now()
	queued := l.position != nil
	l.position = nil
	l.mu.Unlock()
	if queued {
		l.signal(l.moved)
	}
}

// add buffers text. When the buffer is full, bounded text is dropped and
// counted in a gap entry in its place, so the client learns what it missed.
func (l *live) add(k kind, text string, bounded bool) {
	if text == "" {
		return
	}
	l.mu.Lock()
	if k == kindStdout || k == kindStderr {
		l.written += int64(len(text))
	}
	n := len(l.pending)
	var last *entry
	if n > 0 {
		last = &l.pending[n-1]
	}
	switch {
	case bounded && l.size+len(text)+entryCost > l.opts.Buffer:
		if last != nil && last.kind == kindGap {
			last.lost += len(text)
		} else {
			// One gap per run of drops, and a gap follows an entry that
			// fit: the buffer never holds more than Buffer+entryCost.
			l.pending = append(l.pending, entry{kind: kindGap, lost: len(text)})
			l.size += entryCost
		}
	case last != nil && last.kind == k:
		last.text = append(last.text, text...)
		l.size += len(text)
	default:
		l.pending = append(l.pending, entry{kind: k, text: append([]byte(nil), text...)})
		l.size += len(text) + entryCost
	}
	l.mu.Unlock()
	l.signal(l.wake)
}

func (l *live) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop sends buffered output at most every flushInterval, and progress.
func (l *live) loop() {
	defer close(l.done)
	var tick <-chan time.Time
	if l.token != nil {
		t := time.NewTicker(l.opts.ProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	var flushAt <-chan time.Time // set while a send waits for its turn
	var last time.Time
	for {
		select {
		case <-l.wake:
			if flushAt != nil {
				continue
			}
			if d := flushInterval - time.Since(last); d > 0 {
				flushAt = time.After(d)
				continue
			}
			l.flush()
			last = time.Now()
		case <-flushAt:
			flushAt = nil
			l.flush()
			last = time.Now()
		case <-l.moved:
			l.sendProgress()
		case <-tick:
			l.sendProgress()
		case <-l.stop:
			// A call that left the line and ended at once may have both
			// signals ready, and select picks either: tell it started.
			select {
			case <-l.moved:
				l.sendProgress()
			default:
			}
			l.flush()
			return
		}
	}
}

// flush sends everything buffered, one log message per run of one kind.
func (l *live) flush() {
	l.mu.Lock()
	batch := l.pending
	l.pending, l.spare = l.spare[:0], nil
	l.size = 0
	l.mu.Unlock()
	for i := range batch {
		e := &batch[i]
		if !l.broken {
			l.send(e)
		}
		e.text = nil
	}
	l.mu.Lock()
	l.spare = batch[:0]
	l.mu.Unlock()
}

func (l *live) send(e *entry) {
	text := string(e.text)
	switch e.kind {
	case kindPackage, kindNotice, kindSevere:
		text = text[:len(text)-1] // the newline add put between lines
	case kindGap:
		text = fmt.Sprintf("%d bytes of output were not sent here: the client reads more slowly than the code writes (the result has them)", e.lost)
	}
	err := l.ss.Log(l.ctx, &sdk.LoggingMessageParams{
		Level:  kindLevel[e.kind],
		Logger: LogLogger,
		Data:   LogData{CallID: l.id, ProgressToken: l.token, Stream: kindStream[e.kind], Text: text},
	})
	l.check(err)
}

// sendProgress reports where the call is: its place in line, or how long
// it has run and how much it wrote. Progress counts the seconds since the
// call arrived, so that it grows across the wait and the run.
func (l *live) sendProgress() {
	if l.token == nil || l.broken {
		return
	}
	l.mu.Lock()
	position, started, written := l.position, l.started, l.written
	l.mu.Unlock()
	var msg string
	switch {
	case !started.IsZero():
		msg = fmt.Sprintf("running for %s; %s of output", time.Since(started).Round(100*time.Millisecond), humanBytes(int(written)))
	case position != nil:
		switch n := position(); n {
		case 0:
			msg = "starting"
		case 1:
			msg = "waiting for a free worker; next in line"
		default:
			msg = fmt.Sprintf("waiting for a free worker; %d calls ahead", n-1)
		}
	default:
		return // not in line yet: a moment
	}
	p := math.Round(time.Since(l.began).Seconds()*1000) / 1000
	if p <= l.progress {
		p = l.progress + 0.001
	}
	l.progress = p
	l.check(l.ss.NotifyProgress(l.ctx, &sdk.ProgressNotificationParams{ProgressToken: l.token, Progress: p, Message: msg}))
}

func (l *live) check(err error) {
	if err != nil && !l.broken {
		l.broken = true
		l.log.Debug("live output stops: the client is gone", "id", l.id, "error", err)
	}
}

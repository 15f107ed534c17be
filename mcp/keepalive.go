package mcp

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// keepAliveComment is an SSE comment line: every SSE client ignores it, and
// the bytes keep idle-read timeouts (httpx's, a proxy's) from firing while a
// long call runs. The SDK writes each event with a single Write, so a
// comment written between two Writes never splits an event; the SDK itself
// opens its standalone stream with such a comment.
const keepAliveComment = ": keep-alive\n\n"

// streamHeader carries the id of a POST's response, from pyrun's HTTP layer
// through the SDK (RequestExtra.Header) to the tool handler. Whatever a
// client sends under this name is replaced.
const streamHeader = "X-Pyrun-Stream"

// liveStreams finds the response writer of the POST a tool call came in.
// Its methods are safe for concurrent use.
type liveStreams struct {
	seq atomic.Uint64
	m   sync.Map // id -> *streamWriter
}

// keepAlive wraps next so that an event stream it answers with gets a
// comment line whenever it has been quiet for every. A stream whose
// headers the SDK has not sent yet (the response to a POSTed call, which it
// sends when the call ends) is opened early once the call's handler runs
// (see opened). Writes stop before next's ServeHTTP returns.
func (l *liveStreams) keepAlive(next http.Handler, every time.Duration) http.Handler {
	if every <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w, every: every}
		defer sw.stop()
		r.Header.Del(streamHeader)
		if r.Method == http.MethodPost {
			id := strconv.FormatUint(l.seq.Add(1), 10)
			r.Header.Set(streamHeader, id)
			l.m.Store(id, sw)
			defer l.m.Delete(id)
		}
		next.ServeHTTP(sw, r)
	})
}

// opened tells the POST that carried req that a handler is running: the
// SDK has set the response's headers by then (it hands calls to handlers
// only after that), so an event stream may be started and kept alive.
func (l *liveStreams) opened(req *sdk.CallToolRequest) {
	if req == nil || req.Extra == nil || req.Extra.Header == nil {
		return // stdio, HTTP+SSE (its GET stream is already open)
	}
	if sw, ok := l.m.Load(req.Extra.Header.Get(streamHeader)); ok {
		sw.(*streamWriter).expectStream()
	}
}

// streamWriter serialises the handler's writes with the keep-alive ones.
type streamWriter struct {
	http.ResponseWriter
	every time.Duration

	mu      sync.Mutex
	header  bool      // the headers have been sent
	stream  bool      // they were an event stream's
	expect  bool      // a handler runs: the SDK has set the headers
	stopped bool      // no more keep-alive writes
	last    time.Time // of the last write
	quit    chan struct{}
	done    chan struct{}
}

func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeHeaderLocked(code)
}

func (s *streamWriter) writeHeaderLocked(code int) {
	s.ResponseWriter.WriteHeader(code)
	if code >= 100 && code < 200 {
		return // informational: the real header is still to come
	}
	if s.header {
		return
	}
	s.header = true
	if code == http.StatusOK && isEventStream(s.Header()) {
		s.stream = true
		s.startLocked()
	}
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

// startLocked starts the ticker, once.
func (s *streamWriter) startLocked() {
	if s.quit != nil || s.stopped {
		return
	}
	s.last = time.Now()
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go s.tick()
}

// expectStream starts the ticker for a response whose headers are set but
// not sent: if they are an event stream's when it fires, they are sent.
func (s *streamWriter) expectStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header {
		return
	}
	s.expect = true
	s.startLocked()
}

func (s *streamWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.header {
		s.writeHeaderLocked(http.StatusOK)
	}
	s.last = time.Now()
	return s.ResponseWriter.Write(b)
}

func (s *streamWriter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.header {
		s.writeHeaderLocked(http.StatusOK)
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's other
// controls (deadlines, full duplex).
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *streamWriter) tick() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.ping()
		}
	}
}

func (s *streamWriter) ping() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || time.Since(s.last) < s.every/2 {
		return
	}
	if !s.header {
		if !s.expect || !isEventStream(s.Header()) {
			return
		}
		s.header, s.stream = true, true
		s.ResponseWriter.WriteHeader(http.StatusOK)
	} else if !s.stream {
		return
	}
	s.last = time.Now()
	if _, err := s.ResponseWriter.Write([]byte(keepAliveComment)); err == nil {
		_ = http.NewResponseController(s.ResponseWriter).Flush()
	}
}

// stop ends the keep-alive writes; it returns once the ticker is gone.
func (s *streamWriter) stop() {
	s.mu.Lock()
	s.stopped = true
	quit, done := s.quit, s.done
	s.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

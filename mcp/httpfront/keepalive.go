package httpfront

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// keepAliveComment is an SSE comment line: every SSE client ignores it, and
// the bytes keep idle-read timeouts (httpx's, a proxy's) from firing while a
// long call runs. The SDK writes each event with a single Write, so a
// comment written between two Writes never splits an event; the SDK itself
// opens its standalone stream with such a comment.
const keepAliveComment = ": keep-alive\n\n"

// keepAlive is the response writer of an exchange that may become an
// event stream: it serialises the SDK's writes with keep-alive comments,
// written whenever the stream has been quiet for every. A stream whose
// headers the SDK has not sent yet (the response to a POSTed call, which it
// sends when the call ends) is opened early once the call's handler runs
// (expectStream). Writes stop with stop.
type keepAlive struct {
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

func newKeepAlive(w http.ResponseWriter, every time.Duration) *keepAlive {
	return &keepAlive{ResponseWriter: w, every: every}
}

func (s *keepAlive) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeHeaderLocked(code)
}

func (s *keepAlive) writeHeaderLocked(code int) {
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
func (s *keepAlive) startLocked() {
	if s.quit != nil || s.stopped {
		return
	}
	s.last = time.Now()
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go s.tick()
}

// expectStream starts the ticker for a response whose headers are set but
// not sent: if they are an event stream's when it fires, they are sent.
func (s *keepAlive) expectStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header {
		return
	}
	s.expect = true
	s.startLocked()
}

func (s *keepAlive) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.header {
		s.writeHeaderLocked(http.StatusOK)
	}
	s.last = time.Now()
	return s.ResponseWriter.Write(b)
}

func (s *keepAlive) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.header {
		s.writeHeaderLocked(http.StatusOK)
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's other
// controls (deadlines, full duplex).
func (s *keepAlive) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *keepAlive) tick() {
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

func (s *keepAlive) ping() {
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
func (s *keepAlive) stop() {
	s.mu.Lock()
	s.stopped = true
	quit, done := s.quit, s.done
	s.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

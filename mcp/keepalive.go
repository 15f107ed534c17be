package mcp

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// keepAliveComment is an SSE comment line: every SSE client ignores it, and
// the bytes keep idle-read timeouts (httpx's, a proxy's) from firing while a
// long call runs. The SDK writes each event with a single Write, so a
// comment written between two Writes never splits an event.
const keepAliveComment = ": keep-alive\n\n"

// keepAlive wraps next so that an event stream it opens gets a comment line
// whenever it has been quiet for every. The ticker starts with the stream
// and stops before next's ServeHTTP returns; no write follows it.
func keepAlive(next http.Handler, every time.Duration) http.Handler {
	if every <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w, every: every}
		defer sw.stop()
		next.ServeHTTP(sw, r)
	})
}

// streamWriter serialises the handler's writes with the keep-alive ones.
type streamWriter struct {
	http.ResponseWriter
	every time.Duration

	mu      sync.Mutex
	header  bool      // the headers have been sent
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
	ct := s.Header().Get("Content-Type")
	if code == http.StatusOK && strings.HasPrefix(ct, "text/event-stream") && !s.stopped {
		s.last = time.Now()
		s.quit, s.done = make(chan struct{}), make(chan struct{})
		go s.tick()
	}
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

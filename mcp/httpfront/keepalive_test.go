package httpfront

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// keepAliveHandler serves next with a keep-alive writer of every, as pass
// does; a handler that starts may tell the writer with expect.
func keepAliveHandler(every time.Duration, next func(w http.ResponseWriter, r *http.Request, expect func())) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := newKeepAlive(w, every)
		defer k.stop()
		next(k, r, k.expectStream)
	})
}

// readStream reads an event stream's lines to its end, and closes release
// once it has seen after keep-alive comments.
func readStream(body io.Reader, after int, release chan struct{}) (comments int, lines []string) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == ": keep-alive" {
			if comments++; comments == after {
				close(release)
			}
		}
	}
	return comments, lines
}

// A quiet event stream gets comment lines; events still arrive whole.
func TestKeepAliveComments(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(keepAliveHandler(20*time.Millisecond, func(w http.ResponseWriter, r *http.Request, _ func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-release
		fmt.Fprint(w, "event: message\ndata: {\"x\":1}\n\n")
	}))
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	comments, lines := readStream(resp.Body, 3, release)
	want := []string{"event: message", `data: {"x":1}`, ""}
	if comments < 3 || len(lines) < 3 || !slices.Equal(lines[len(lines)-3:], want) {
		t.Errorf("stream lines %q: want 3 keep-alive comments, then the event whole", lines)
	}
}

// The response to a POSTed call has its headers set but not sent while the
// call runs; once the call's handler runs, the stream is opened and kept
// alive too.
func TestKeepAliveOpensCallStreams(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(keepAliveHandler(20*time.Millisecond, func(w http.ResponseWriter, r *http.Request, expect func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		// What the SDK does: hand the call to a handler (carry tells
		// the writer), wait for its result.
		handled := make(chan struct{})
		go func() {
			expect()
			close(handled)
		}()
		<-handled
		<-release
		fmt.Fprint(w, "event: message\ndata: {}\n\n")
	}))
	defer ts.Close()
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader("{}")) // returns once the headers arrive
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	comments, lines := readStream(resp.Body, 2, release)
	if comments < 2 || lines[len(lines)-2] != "data: {}" {
		t.Errorf("stream lines %q: want keep-alive comments, then the event", lines)
	}
}

// A response that is not an event stream gets nothing added.
func TestKeepAliveLeavesOtherResponses(t *testing.T) {
	h := keepAliveHandler(time.Nanosecond, func(w http.ResponseWriter, r *http.Request, _ func()) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
	if rec.Body.String() != "{}" {
		t.Errorf("body %q, want {}", rec.Body)
	}
}

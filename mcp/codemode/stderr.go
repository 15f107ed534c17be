package codemode

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
)

// What a stdio server writes to its stderr is its own business, and often
// more than pyrun should keep: servers print their settings, their
// environment (which holds the env of its mcp_servers entry, API keys
// among them), or a stack trace per request. So it is logged at debug
// level only, each line cut at maxStderrLine and escaped, and at most
// maxStderrLogged bytes per server process; past that, one line says so.
const (
	maxStderrLine   = 1 << 10
	maxStderrLogged = 64 << 10
)

// serverStderr is the stderr of one server process. Write is called by the
// goroutine exec.Cmd copies stderr with; the mutex is for safety only.
type serverStderr struct {
	log hclog.Logger

	mu     sync.Mutex
	line   []byte // the line being written, at most maxStderrLine bytes
	cut    int    // bytes of that line past maxStderrLine
	logged int    // bytes logged so far
	full   bool   // the cap was reached and said so
}

func (w *serverStderr) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		chunk, rest, end := bytes.Cut(p, []byte{'\n'})
		room := maxStderrLine - len(w.line)
		if len(chunk) > room {
			w.cut += len(chunk) - room
			chunk = chunk[:room]
		}
		w.line = append(w.line, chunk...)
		if !end {
			break
		}
		w.emit()
		p = rest
	}
	return n, nil
}

// emit logs the line written, if the cap allows, and starts the next.
func (w *serverStderr) emit() {
	line, cut := w.line, w.cut
	w.line, w.cut = w.line[:0], 0
	if w.full || !w.log.IsDebug() {
		return
	}
	if w.logged+len(line) > maxStderrLogged {
		w.full = true
		w.log.Debug("the server's stderr passed the most pyrun logs of it; the rest is not logged", "logged_bytes", w.logged)
		return
	}
	w.logged += len(line)
	if cut > 0 {
		w.log.Debug("stderr", "line", escapeText(line), "cut_bytes", cut)
		return
	}
	w.log.Debug("stderr", "line", escapeText(line))
}

// escapeText is a line for a text log: with Go's escapes for what is not
// printable (terminal sequences, bidirectional overrides) or not UTF-8.
func escapeText(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) || bytes.ContainsFunc(b, func(r rune) bool { return !strconv.IsPrint(r) && r != '\t' }) {
		q := strconv.Quote(s)
		return q[1 : len(q)-1]
	}
	return s
}

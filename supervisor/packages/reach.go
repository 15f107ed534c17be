package packages

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
)

// ErrUnreachable marks a package source that did not answer at all: its
// host has no address here, refused the connection or timed out. This
// machine may be offline; the way out is a local source.
var ErrUnreachable = errors.New("cannot be reached")

// unreachableError is a download whose source did not answer. It says
// which source (the package index, PyPI), what was fetched, the network's
// own reason in short, and what to do without the source: a user who
// imported matplotlib on an offline machine learns that the index is out
// of reach, not that a lookup of cdn.jsdelivr.net failed for numpy.
type unreachableError struct {
	pypi  bool   // PyPI's JSON API or its files, else the package index
	where string // the index's or PyPI's URL, or the file's when it lies elsewhere
	cause error
}

func (e *unreachableError) Error() string {
	source := "the package index"
	way := "pyrun installs from a --package-index directory (a copy of the Pyodide distribution) or a --wheelhouse of wheels"
	if e.pypi {
		source = "PyPI"
		way = "put the package's wheel in a --wheelhouse, or set --pypi to a mirror this machine reaches"
	}
	return fmt.Sprintf("%s %s %s (%s); is this machine offline? Without it, %s",
		source, e.where, ErrUnreachable, netReason(e.cause), way)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.cause} }

// unreachable reports whether err, from an HTTP client, means the server
// never answered (rather than answering badly).
func unreachable(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &dns) || errors.As(err, &op) || errors.As(err, &ne) && ne.Timeout()
}

// netReason is the network's reason for err without the resolver's address
// and the dial's wording: "lookup cdn.jsdelivr.net: no such host",
// "connect to 127.0.0.1:9: connection refused".
func netReason(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "lookup " + dns.Name + ": " + dns.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && op.Addr != nil {
		why := op.Err
		var se *os.SyscallError
		if errors.As(why, &se) {
			why = se.Err
		}
		return "connect to " + op.Addr.String() + ": " + why.Error()
	}
	return err.Error()
}

// unreachableAt is the error of a fetch of url that did not reach its
// server; pypi: url is PyPI's (its API's or a file it lists).
func (r *Resolver) unreachableAt(url string, pypi bool, cause error) error {
	where := url
	switch {
	case pypi && strings.HasPrefix(url, r.pypiBase):
		where = r.pypiBase
	case !pypi && strings.HasPrefix(url, r.index):
		where = r.index
	}
	return &unreachableError{pypi: pypi, where: where, cause: cause}
}

// do sends req; pypi: it is PyPI's, for errors. An error names the URL,
// and is an unreachableError when the server did not answer.
func (r *Resolver) do(ctx context.Context, req *http.Request, pypi bool) (*http.Response, error) {
	resp, err := r.client.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // it would name the URL again
		}
		if ctx.Err() == nil && unreachable(err) {
			return nil, r.unreachableAt(req.URL.String(), pypi, err)
		}
		return nil, fmt.Errorf("fetch %s: %w", req.URL, err)
	}
	return resp, nil
}

// Source is a place a Resolver downloads from, as Reach found it.
type Source struct {
	What string // "the package index https://..." or "PyPI https://..."
	PyPI bool   // PyPI (or its mirror), else the package index
	Err  error  // nil: it answered; ErrUnreachable: its server did not answer at all
}

// Reach asks the sources r downloads from whether they answer, as pyrun
// warmup does: the package index when it is a URL (the default index's
// files are on its CDN), for its lock file, and PyPI when it is asked, for
// anything. Offline it asks nothing: nothing is downloaded.
func (r *Resolver) Reach(ctx context.Context) []Source {
	var out []Source
	if r.opt.Offline {
		return nil
	}
	if IsURL(r.index) {
		out = append(out, Source{What: "the package index " + r.index, Err: r.probe(ctx, r.index+"pyodide-lock.json", false)})
	}
	if r.pypiBase != "" {
		out = append(out, Source{What: "PyPI " + r.pypiBase, PyPI: true, Err: r.probe(ctx, r.pypiBase+"pip/json", true)})
	}
	return out
}

// probe asks for the first byte of url. Any answer from PyPI will do (a
// mirror may lack the project asked for); the index must have its lock
// file.
func (r *Resolver) probe(ctx context.Context, url string, pypi bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", "bytes=0-0")
	resp, err := r.do(ctx, req, pypi)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if !pypi && resp.StatusCode/100 != 2 {
		return fmt.Errorf("the package index %s answers %s for its pyodide-lock.json", r.index, resp.Status)
	}
	return nil
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pyrun/pyrun/supervisor/packages"
)

// packageNeeds resolves the packages a call needs (its "need" events), one
// need at a time: a worker that asks again before it has its answer breaks
// the protocol. It is a hostRequests.
type packageNeeds struct {
	pkgs   *packages.Resolver // nil: none can be had
	id     string             // the call's
	tr     *transcript
	write  func(request) error
	ctx    context.Context // ends when the call is stopped or ends
	cancel context.CancelFunc
	ch     chan hostAnswer

	pending   bool       // a need is being resolved
	cutByStop bool       // the last answer said no because the call was stopped
	conflict  bool       // the last answer said no: another version is loaded here
	retire    retirement // from an answer: the worker serves no other call
}

// newPackageNeeds prepares the needs of call id, resolved through pkgs and
// answered with write.
func newPackageNeeds(ctx context.Context, pkgs *packages.Resolver, id string, tr *transcript, write func(request) error) *packageNeeds {
	n := &packageNeeds{pkgs: pkgs, id: id, tr: tr, write: write, ch: make(chan hostAnswer, 1)}
	n.ctx, n.cancel = context.WithCancel(ctx)
	return n
}

func (n *packageNeeds) start(ev event) *fault {
	if n.pending {
		return &fault{fmt.Errorf("%w: a second need before the first was answered", errGarbage), retireProtocol}
	}
	n.pending = true
	if n.tr.events != nil {
		n.tr.events.Package(needText(ev))
	}
	go func() { n.ch <- resolve(n.ctx, n.pkgs, n.id, ev) }()
	return nil
}

func (n *packageNeeds) answers() <-chan hostAnswer { return n.ch }

func (n *packageNeeds) took(ans hostAnswer, stopping bool) *fault {
	n.pending = false
	if ans.retire.given() {
		n.retire = ans.retire
	}
	if n.tr.events != nil {
		n.tr.events.Package(answerText(ans.req))
	}
	n.cutByStop = stopping && ans.req.Error != ""
	n.conflict = ans.retire == retireVersionConflict
	if err := n.write(ans.req); err != nil {
		return &fault{fmt.Errorf("the worker did not take its packages: %w", err), retirement{RestartProtocol, "it did not take its packages"}}
	}
	return nil
}

// stop: a fetch in progress is for nothing now.
func (n *packageNeeds) stop() { n.cancel() }

// finish retires a worker whose need is still unanswered: it waits for the
// answer, and would take the next call's line for it. A conflict an answer
// told of stands unless the call's end gave another reason.
func (n *packageNeeds) finish(retire retirement) retirement {
	n.cancel()
	if n.pending {
		<-n.ch
		n.pending = false
		return retirement{RestartInterrupt, "it was stopped while its packages were being fetched"}
	}
	if retire.given() {
		return retire
	}
	return n.retire
}

// result amends the call's result: an install-error the stop cut short
// is an interrupt. It reports whether the call did not run for a conflict
// with a package the worker has loaded (callEnd.conflict).
func (n *packageNeeds) result(ev *event, stopping bool) (conflict bool) {
	if n.cutByStop && ev.Status == "install-error" {
		ev.Status = "interrupted"
	}
	return n.conflict && ev.Status == "install-error" && !stopping
}

// resolve answers a worker's need through pkgs: the files of the packages
// it is to load, or why they cannot be had. It runs on its own goroutine
// and must not touch the worker. A conflict with a package the worker
// has loaded retires the worker after the call, so that the next call that
// needs the other version gets a fresh one.
func resolve(ctx context.Context, pkgs *packages.Resolver, id string, need event) hostAnswer {
	ans := request{Type: "packages", ID: id}
	if pkgs == nil {
		ans.Error = "pyrun: this pool loads no packages"
		return hostAnswer{req: ans}
	}
	var retire retirement
	files, err := pkgs.Resolve(ctx, packages.Request{
		Imports: need.Imports, Requires: need.Requires, RequiresPython: need.RequiresPython, Loaded: need.Loaded,
	})
	switch {
	case errors.Is(err, packages.ErrLoadedConflict):
		retire = retireVersionConflict
		fallthrough
	case err != nil:
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (the call was stopped while its packages were fetched)", err)
		}
		ans.Error = err.Error()
	default:
		ans.Files = files
	}
	return hostAnswer{req: ans, retire: retire}
}

// needText and answerText say what a call's packages are doing, for the
// client's live log.
func needText(need event) string {
	what := need.Requires
	if len(what) == 0 {
		what = need.Imports
	}
	return "pyrun: finding packages for " + strings.Join(what, ", ")
}

func answerText(ans request) string {
	if ans.Error != "" {
		return "pyrun: " + ans.Error
	}
	if len(ans.Files) == 0 {
		return "pyrun: no packages to load"
	}
	names := make([]string, len(ans.Files))
	for i, f := range ans.Files {
		names[i] = f.Name + " " + f.Version
	}
	return "pyrun: loading " + strings.Join(names, ", ")
}

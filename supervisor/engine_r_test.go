package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
)

// realEnginePool is a pool of a real engine, through the supervisor: the
// engine's permissions and flags as the pool builds them start its real
// worker, which must say it is that engine.
func realEnginePool(t *testing.T, e supervisor.Engine, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	p, err := supervisor.NewEnginePool(testruntime.Get(t), e, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	supervisor.CloseAtEnd(t, p)
	return p
}

func realRPool(t *testing.T, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	return realEnginePool(t, supervisor.R, cfg)
}

func TestRPoolRunsR(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 1, Timeout: 60 * time.Second})
	if p.Engine().Name() != "r" {
		t.Fatalf("engine %q, want r", p.Engine().Name())
	}
	res := run(t, p, supervisor.Job{Code: "cat('hi\\n'); message('note'); sum(1:10)", Language: "r"})
	if res.Status != supervisor.StatusSuccess || res.Stdout != "hi\n[1] 55\n" || res.Stderr != "note\n" || res.Value != "55" {
		t.Errorf("result %+v", res)
	}
	res = run(t, p, supervisor.Job{Code: "stop('boom')", Language: "r"})
	if res.Status != supervisor.StatusRunError || !strings.Contains(res.Error, "Error: boom") {
		t.Errorf("error: %s %q", res.Status, res.Error)
	}
	res = run(t, p, supervisor.Job{Code: "plot(1:10)", Language: "r"})
	if len(res.Displays) != 1 || res.Displays[0].MIMEType != "image/png" {
		t.Fatalf("plot: displays %+v", res.Displays)
	}
	if _, err := png.Decode(bytes.NewReader(res.Displays[0].Data)); err != nil {
		t.Errorf("plot is not a PNG: %v", err)
	}
	// A call past its time limit is interrupted inside R; the worker lives on.
	began := time.Now()
	res = run(t, p, supervisor.Job{Code: "while (TRUE) {}", Language: "r", Timeout: 2 * time.Second})
	if res.Status != supervisor.StatusTimeout {
		t.Errorf("busy loop: status %s (%s), want timeout", res.Status, res.Error)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("busy loop stopped after %s", d)
	}
	res = run(t, p, supervisor.Job{Code: "exists('x')", Language: "r"})
	if res.Status != supervisor.StatusSuccess || res.Value != "false" {
		t.Errorf("after the timeout: %+v", res)
	}
	if r := p.Stats().Counts.Restarts; len(r) != 0 {
		t.Errorf("worker restarts %v, want none: an interrupted R serves on, and its memory after a plot stays within the idle slack", r)
	}
	// Code that ends its own process (JavaScript through webR's ffi) takes
	// down that worker only: the call is crashed, the next gets a new one.
	res = run(t, p, supervisor.Job{Code: ".Call(webr:::ffi_eval_js, 'Deno.exit(3)', FALSE)", Language: "r"})
	if res.Status != supervisor.StatusCrashed {
		t.Errorf("Deno.exit from R: status %s (%s), want crashed", res.Status, res.Error)
	}
	res = run(t, p, supervisor.Job{Code: "1 + 1", Language: "r"})
	if res.Status != supervisor.StatusSuccess || res.Value != "2" {
		t.Errorf("after the crash: %+v", res)
	}
}

// R's output reaches the call's Events while the call runs: the lines a
// call writes before it sleeps for ten minutes come, in order across the
// streams, while it sleeps (the test then cancels it), and the worker,
// interrupted, serves on.
func TestRPoolLiveOutput(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 1, Timeout: 900 * time.Second})
	first := run(t, p, supervisor.Job{Code: "1", Language: "r"}) // the worker is up
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := newOutputWaiter()
	type ended struct {
		res supervisor.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		code := "cat('early\\n'); message('note'); cat('more\\n'); Sys.sleep(600); cat('late\\n')"
		res, err := p.Run(ctx, supervisor.Job{ID: "live", Code: code, Language: "r"}, out)
		done <- ended{res, err}
	}()
	out.wait(t, "early\nnote\nmore\n")
	select {
	case e := <-done:
		t.Fatalf("the call ended (%v %+v) before the test saw its first lines; they must come while it sleeps", e.err, e.res)
	default:
	}
	cancel()
	if e := <-done; !errors.Is(e.err, context.Canceled) {
		t.Errorf("the cancelled call: %v %+v, want context.Canceled", e.err, e.res)
	}
	want := []supervisor.Chunk{
		{Stream: supervisor.Stdout, Text: "early\n"},
		{Stream: supervisor.Stderr, Text: "note\n"},
		{Stream: supervisor.Stdout, Text: "more\n"},
	}
	if got := out.lines(); !slices.Equal(got, want) {
		t.Errorf("the call's output %+v, want %+v: in the order written", got, want)
	}
	// The result holds the lines in order too; a text without a newline
	// ends with one.
	res := run(t, p, supervisor.Job{Code: "cat('next\\n'); message('b'); cat('c')", Language: "r"})
	want = []supervisor.Chunk{
		{Stream: supervisor.Stdout, Text: "next\n"},
		{Stream: supervisor.Stderr, Text: "b\n"},
		{Stream: supervisor.Stdout, Text: "c\n"},
	}
	if res.Status != supervisor.StatusSuccess || !slices.Equal(res.Output, want) || res.Stdout != "next\nc\n" ||
		res.Stderr != "b\n" || res.Worker != first.Worker {
		t.Errorf("after the cancel: %+v; want the same worker (%s) to serve on, output %+v", res, first.Worker, want)
	}
}

// Concurrent R calls on two workers keep their own output and values.
func TestRPoolConcurrentCallsDoNotMix(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 2, Timeout: 120 * time.Second})
	const calls = 6
	errs := make(chan string, calls)
	for i := range calls {
		go func() {
			code := fmt.Sprintf("me <- %d\nfor (k in 1:50) cat('call', me, '\\n')\nSys.sleep(0.1)\nme * 10", i)
			res, err := p.Run(t.Context(), supervisor.Job{ID: fmt.Sprint("c", i), Code: code, Language: "r"}, nil)
			switch {
			case err != nil:
				errs <- err.Error()
			case res.Status != supervisor.StatusSuccess || res.Value != fmt.Sprint(i*10):
				errs <- fmt.Sprintf("call %d: %s %q %s", i, res.Status, res.Value, res.Error)
			case res.Stdout != strings.Repeat(fmt.Sprintf("call %d \n", i), 50)+fmt.Sprintf("[1] %d\n", i*10):
				errs <- fmt.Sprintf("call %d: stdout %q", i, res.Stdout)
			default:
				errs <- ""
			}
		}()
	}
	for range calls {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// A fresh R worker goes on compiling webR's wasm in the background for
// seconds after ready (StartupWork); the idle CPU checks must not take
// that for code a call left running. Before, the pool replaced its R
// worker every 3-4 s, for ever.
func TestRWorkerIsNotReplacedWhileItSettles(t *testing.T) {
	p := realRPool(t, supervisor.Config{Workers: 1, Timeout: 60 * time.Second})
	deadline := time.Now().Add(90 * time.Second)
	for p.Stats().Ready < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no R worker ready: %+v", p.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(15 * time.Second) // idle, through the background compile
	st := p.Stats()
	var restarts, starts int64
	for _, n := range st.Counts.Restarts {
		restarts += n
	}
	for _, n := range st.Counts.Starts {
		starts += n
	}
	if restarts != 0 || starts != 1 {
		t.Fatalf("an idle R pool: %d restarts (%v), %d starts, want none and 1", restarts, st.Counts.Restarts, starts)
	}
	if res := run(t, p, supervisor.Job{Code: "1 + 1", Language: "r"}); res.Value != "2" {
		t.Errorf("call after settling: %+v", res)
	}
}

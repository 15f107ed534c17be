package supervisor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// realJSPool is a pool of the real JavaScript engine.
func realJSPool(t *testing.T, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	return realEnginePool(t, supervisor.JavaScript, cfg)
}

func TestJavaScriptPool(t *testing.T) {
	p := realJSPool(t, supervisor.Config{Workers: 1})
	if p.Engine().Name() != "javascript" {
		t.Fatalf("engine %q", p.Engine().Name())
	}
	res := run(t, p, supervisor.Job{Code: "console.log('hi');\nconsole.error('err');\nconst n: number = 6;\nn * 7"})
	if res.Status != supervisor.StatusSuccess || res.Stdout != "hi\n" || res.Stderr != "err\n" || res.Value != "42" {
		t.Fatalf("first call: %+v", res)
	}
	res = run(t, p, supervisor.Job{Code: "globalThis.leak = 1;\nthrow new TypeError('bad')"})
	if res.Status != supervisor.StatusRunError || !strings.HasPrefix(res.Error, "TypeError: bad\n    at main.ts:2:7") {
		t.Fatalf("error call: %+v", res)
	}
	res = run(t, p, supervisor.Job{Code: "typeof leak"})
	if res.Value != `"undefined"` {
		t.Fatalf("a global of one call reached the next: %+v", res)
	}
	// A busy loop times out; the worker is replaced and the pool goes on.
	began := time.Now()
	res = run(t, p, supervisor.Job{Code: "while (true) {}", Timeout: time.Second})
	if res.Status != supervisor.StatusTimeout {
		t.Fatalf("busy loop: %+v", res)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("busy loop answered after %s, want about its 1s timeout", took)
	}
	t.Logf("busy loop with a 1s timeout answered after %s", time.Since(began))
	res = run(t, p, supervisor.Job{Code: "await new Promise((r) => setTimeout(r, 1e6))", Timeout: time.Second})
	if res.Status != supervisor.StatusTimeout {
		t.Fatalf("sleep: %+v", res)
	}
	res = run(t, p, supervisor.Job{Code: "'after'"})
	if res.Status != supervisor.StatusSuccess || res.Value != `"after"` {
		t.Fatalf("after the timeouts: %+v", res)
	}
}

func TestJavaScriptSessionKeepsState(t *testing.T) {
	p := realJSPool(t, supervisor.Config{Workers: 1})
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i, step := range []struct{ code, value string }{
		{"let total = 0;\nfunction add(n: number) { total += n; return total }", ""},
		{"add(2); add(3)", "5"},
		{"total", "5"},
	} {
		res, err := d.Run(t.Context(), supervisor.Job{ID: fmt.Sprint("s", i), Code: step.code, InSession: supervisor.SessionCall{KeepOutput: true}}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess || res.Value != step.value {
			t.Fatalf("step %d %q: %+v, %v", i, step.code, res, err)
		}
	}
}

// Concurrent calls on two workers: each gets its own output and value.
func TestJavaScriptConcurrentCallsDoNotMix(t *testing.T) {
	p := realJSPool(t, supervisor.Config{Workers: 2})
	const n = 6
	results := make(chan supervisor.Result, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			code := fmt.Sprintf("for (let j = 0; j < 50; j++) console.log('call %d line ' + j);\nawait new Promise((r) => setTimeout(r, 10));\n%d", i, i)
			res, err := p.Run(t.Context(), supervisor.Job{ID: fmt.Sprint("c", i), Code: code}, nil)
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case res := <-results:
			if res.Status != supervisor.StatusSuccess {
				t.Fatalf("call: %+v", res)
			}
			want := ""
			for j := range 50 {
				want += fmt.Sprintf("call %s line %d\n", res.Value, j)
			}
			if res.Stdout != want {
				t.Errorf("call %s: stdout mixed or short:\n%s", res.Value, res.Stdout)
			}
		}
	}
}

// Code that writes to the worker's stdout through node:fs breaks only its
// own worker: the call ends crashed, the worker is replaced, the pool goes on.
func TestJavaScriptStdoutGarbageEndsOnlyItsWorker(t *testing.T) {
	p := realJSPool(t, supervisor.Config{Workers: 1})
	res := run(t, p, supervisor.Job{Code: "import { writeSync } from 'node:fs';\nwriteSync(1, 'not an event\\n');\nawait new Promise((r) => setTimeout(r, 1e6));"})
	if res.Status != supervisor.StatusCrashed {
		t.Fatalf("garbage on stdout: %+v", res)
	}
	res = run(t, p, supervisor.Job{Code: "'alive'"})
	if res.Status != supervisor.StatusSuccess || res.Value != `"alive"` {
		t.Fatalf("after it: %+v", res)
	}
}

package supervisor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// realJSPool is a pool of the real JavaScript engine.
func realJSPool(t *testing.T, cfg supervisor.Config) *supervisor.Pool {
	t.Helper()
	p, err := supervisor.NewEnginePool(testRuntime(t), supervisor.JavaScript, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
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
		res, err := d.Run(t.Context(), supervisor.Job{ID: fmt.Sprint("s", i), Code: step.code, KeepOutput: true}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess || res.Value != step.value {
			t.Fatalf("step %d %q: %+v, %v", i, step.code, res, err)
		}
	}
}

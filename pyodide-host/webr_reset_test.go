package pyodidehost_test

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A stateless R call leaves nothing a later call can see or that changes
// its results (issue 26, item 4): each attack runs on the worker, then
// another call, as another client's, looks for what it left. trace() of a
// base function once survived the reset (it read another client's files
// input and changed later calls' paste()), and a finalizer of one call ran
// in the next.
func TestRStatelessCallsLeaveNoTraces(t *testing.T) {
	w := startR(t, rConfig)
	run := func(code string) rEvent {
		t.Helper()
		r := wantSuccess(t, w.run(code, nil), code)
		if w.recycle != "" {
			t.Fatalf("%s: the worker asks to be replaced (%s), want it set back", code, w.recycle)
		}
		return r
	}
	value := func(code, want string) {
		t.Helper()
		if r := run(code); r.Value == nil || compactJSON(t, *r.Value) != want {
			t.Errorf("%s: %s, want %s", code, derefValue(r), want)
		}
	}
	secret := base64.StdEncoding.EncodeToString([]byte("the victim's secret\n"))

	// trace() on base functions: one that keeps every file read, one that
	// changes paste(); and a base binding replaced outright.
	run(`stash <- new.env()
assign("stash", stash, envir = as.environment("Autoloads"))
trace("readLines", exit = bquote(assign("got", returnValue(), envir = .(stash))), print = FALSE, where = baseenv())
trace("paste", exit = quote(returnValue("traced")), print = FALSE, where = baseenv())
unlockBinding("pi", baseenv()); assign("pi", 3, envir = baseenv())
invisible(paste("x"))`)
	r := wantSuccess(t, w.run("list(readLines('secret.txt'), paste('a', 'b'), pi)",
		map[string]any{"input_files": []map[string]string{{"path": "secret.txt", "data": secret}}}), "victim")
	if r.Value == nil || compactJSON(t, *r.Value) != `["the victim's secret","a b",3.141592653589793]` {
		t.Errorf("the victim's call: %s", derefValue(r))
	}
	value(`list(exists("stash"), is(readLines, "functionWithTrace"), is(paste, "functionWithTrace"))`, `[false,false,false]`)

	// Things registered, hooked and set: each a later call would meet.
	run(`e <- new.env(); reg.finalizer(e, function(x) cat("FINALIZED\n")); rm(e)
registerS3method("print", "pyrunprobe", function(x, ...) cat("HACKED\n"))
setHook("plot.new", function() cat("HOOKED\n"))
addTaskCallback(function(...) TRUE, name = "pyrun-probe")
makeActiveBinding("probe_active", function() "ACTIVE", as.environment("Autoloads"))
for (e in list(asNamespace("stats"), as.environment("package:stats"))) { unlockBinding("sd", e); assign("sd", function(x, na.rm = FALSE) 42, envir = e) }
debug(nchar)
options(digits = 3, pyrun.probe = TRUE)
Sys.setenv(PYRUN_PROBE = "yes"); Sys.setlocale("LC_COLLATE", "C"); RNGkind("Wichmann-Hill")
invisible(.Internal(enableJIT(3L)))
attach(list(attached_probe = 1), name = "probe")
lib <- .libPaths(); .libPaths(c("/tmp", lib))
sink(tempfile())
1`)
	// R keeps the last value at top level: after pyrun's reset it held the
	// options the call had set (what options() gave back).
	if r := run(".Last.value"); r.Value != nil {
		t.Errorf(".Last.value after the call: %s, want NULL", *r.Value)
	}
	evs := w.run(`invisible(gc()); print(structure(1, class = "pyrunprobe")); plot.new()
list(getTaskCallbackNames(), exists("probe_active"), sd(1:3), isdebugged(nchar), getOption("digits"),
  getOption("pyrun.probe"), Sys.getenv("PYRUN_PROBE"), Sys.getlocale("LC_COLLATE") == "C", RNGkind()[1],
  .Internal(enableJIT(-1L)) != 3, exists("attached_probe"), sink.number(),
  "/tmp" %in% .libPaths())`, nil)
	r = wantSuccess(t, evs, "probe")
	if out := output(evs, ""); strings.Contains(out, "FINALIZED") || strings.Contains(out, "HACKED") || strings.Contains(out, "HOOKED") {
		t.Errorf("the earlier call's code ran in this one:\n%s", out)
	}
	if r.Value == nil || compactJSON(t, *r.Value) != `[[],false,1,false,7,null,"",false,"Mersenne-Twister",true,false,0,false]` {
		t.Errorf("what the next call met: %s", derefValue(r))
	}

	// Namespaces a call loaded go, and load again when asked.
	run("library(splines); library(stats4); invisible(bs(1:5, df = 3))")
	value(`list("splines" %in% loadedNamespaces(), "package:stats4" %in% search())`, `[false,false]`)
	value(`library(splines); nrow(bs(1:5, df = 3))`, `5`)

	// What R offers no way back from: the worker asks to be replaced.
	for _, code := range []string{
		`setClass("PyrunProbe", representation(x = "numeric")); 1`,
		`lockEnvironment(globalenv()); 1`,
		`lockEnvironment(get(".userHooksEnv", envir = baseenv())); 1`,
	} {
		wantSuccess(t, w.run(code, nil), code)
		if !strings.Contains(w.recycle, "the call changed R in a way pyrun cannot undo") {
			t.Errorf("%s: idle recycle %q, want the worker replaced", code, w.recycle)
		}
		w = startR(t, rConfig)
	}
}

func derefValue(r rEvent) string {
	if r.Value == nil {
		return "<no value>"
	}
	return *r.Value
}

// BenchmarkRCleanup times pyrun.R's cleanup after a stateless call (the
// reset included) inside a warm worker, by R's own clock, as docs/security.md
// quotes it (cleanup-ms):
//
//	go test -run '^$' -bench BenchmarkRCleanup -benchtime 500x ./pyodide-host/
func BenchmarkRCleanup(b *testing.B) {
	w := startR(b, rConfig)
	line := w.request("1 + 1", nil)
	for range 30 {
		w.send(line)
	}
	// pyrun.R's environment, from the marker its debug() wrapper calls.
	code := fmt.Sprintf(`local({
  p <- environment(body(debug)[[2]][[1]])
  for (i in 1:20) p$cleanup(FALSE, FALSE)
  t0 <- proc.time()[[3]]
  for (i in seq_len(%d)) p$cleanup(FALSE, FALSE)
  (proc.time()[[3]] - t0) * 1000 / %d
})`, b.N, b.N)
	b.ResetTimer()
	evs := w.send(w.request(code, nil))
	b.StopTimer()
	r := evs[len(evs)-1]
	if r.Type != "result" || r.Status != "success" || r.Value == nil {
		b.Fatalf("timing cleanup: %+v", r)
	}
	ms, err := strconv.ParseFloat(*r.Value, 64)
	if err != nil {
		b.Fatalf("value %q: %v", *r.Value, err)
	}
	b.ReportMetric(ms, "cleanup-ms")
}

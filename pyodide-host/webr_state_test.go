package pyodidehost_test

// What a call leaves for the next: nothing (stateless), everything (a
// session), its own namespace's (shared session workers).

import (
	"strings"
	"testing"
)

// Nothing of a stateless call reaches the next: variables, attached
// packages, options, environment variables, the working directory, files.
func TestRStatelessCallsLeaveNothing(t *testing.T) {
	w := startR(t, rConfig)
	wantSuccess(t, w.run("x <- 1; assign('y', 2, envir = globalenv()); library(stats4); options(digits = 3, pyrun.mine = 1)\n"+
		"Sys.setenv(MINE = 'yes', HOME = '/elsewhere'); writeLines('x', 'left.txt'); writeLines('t', file.path(tempdir(), 't'))\n"+
		"writeLines('t', '/tmp/t2'); dir.create('/tmp/d'); setwd('/tmp')", nil), "leave things")
	r := wantSuccess(t, w.run("list(ls(all.names = TRUE), 'package:stats4' %in% search(), getOption('digits'), "+
		"is.null(getOption('pyrun.mine')), Sys.getenv(c('MINE', 'HOME')), getwd(), list.files(), "+
		"list.files(tempdir()), file.exists('/tmp/t2', '/tmp/d'), dir.exists(tempdir()))", nil), "look")
	want := `[[],false,7,true,{"MINE":"","HOME":"/home/web_user"},"/home/web_user",[],[],[false,false],true]`
	if r.Value == nil || compactJSON(t, *r.Value) != want {
		t.Errorf("what the next call sees: %v\nwant %s", r.Value, want)
	}
}

func TestRSessionKeepsState(t *testing.T) {
	w := startR(t, `{"heap_limit":671088640,"max_line":67108864,"session":true}`)
	wantSuccess(t, w.run("x <- 41; library(stats4); writeLines('kept', 'notes.txt'); writeLines('o', '/output/o.txt')",
		map[string]any{"keep_output": true}), "first")
	evs := w.run("writeLines('p', '/output/p.txt'); c(x + 1, 'package:stats4' %in% search(), readLines('notes.txt') == 'kept')",
		map[string]any{"keep_output": true})
	r := wantSuccess(t, evs, "second")
	if r.Value == nil || compactJSON(t, *r.Value) != "[42,1,1]" {
		t.Errorf("session: %v, want [42,1,1]", r.Value)
	}
	var files []string
	for _, ev := range evs {
		if ev.Type == "file" {
			files = append(files, ev.Path)
		}
	}
	if strings.Join(files, ",") != "p.txt" {
		t.Errorf("session files sent %v, want only the one this call wrote", files)
	}
	// An interrupted call leaves the session as the interrupt found it.
	if r := result(t, w.interrupt("x <- 100; while (TRUE) {}", map[string]any{"keep_output": true})); r.Status != "interrupted" {
		t.Fatalf("status %q, want interrupted", r.Status)
	}
	if r := wantSuccess(t, w.run("x", nil), "x"); r.Value == nil || *r.Value != "100" {
		t.Errorf("after the interrupt x = %v, want 100", r.Value)
	}
}

// Sessions as namespaces on one shared session worker (docs/sessions.md,
// Shared session workers): each keeps its own variables (also those a call
// bound in the global environment itself), working directory and files,
// random stream, and options(); a dropped one is gone with its files.
func TestRSharedSessionNamespaces(t *testing.T) {
	w := startR(t, `{"heap_limit":671088640,"max_line":67108864,"session":true}`)
	in := func(ns string, drop ...string) map[string]any {
		return map[string]any{"keep_output": true, "namespace": ns, "drop": drop}
	}
	value := func(evs []rEvent, what string) string {
		t.Helper()
		r := wantSuccess(t, evs, what)
		if r.Value == nil {
			t.Fatalf("%s: no value", what)
		}
		return compactJSON(t, *r.Value)
	}
	wantSuccess(t, w.run("x <- 'a'; assign('g', 'a', envir = globalenv()); f <- function() x\n"+
		"writeLines('a', 'f.txt'); writeLines('a', '/tmp/t.txt'); writeLines('a', '/output/a.txt')\n"+
		"dir.create('sub'); setwd('sub'); options(digits = 3); set.seed(1); first <- runif(2); library(stats4)", in("a")), "a")
	// What is R's, not a session's, is shared (docs/sessions.md): the search path.
	if got := value(w.run("c(exists('x'), exists('g'), exists('f'), file.exists('f.txt', '/tmp/t.txt', '/output/a.txt'), "+
		"getwd(), getOption('digits'), exists('.Random.seed', envir = globalenv()), 'package:stats4' %in% search())", in("b")), "b looks"); got != `["FALSE","FALSE","FALSE","FALSE","FALSE","FALSE","/home/web_user","7","FALSE","TRUE"]` {
		t.Errorf("a new session sees %s, want none of the other's state but the search path", got)
	}
	// b's draws do not move a's stream; a's set.seed does not seed b's.
	wantSuccess(t, w.run("x <- 'b'; writeLines('b', 'f.txt'); set.seed(99); b1 <- runif(1)", in("b")), "b")
	got := value(w.run("set.seed(1); ref <- runif(4); set.seed(1); again <- runif(3)\n"+
		"list(x, g, f(), readLines('../f.txt'), readLines('/tmp/t.txt'), list.files('/output'), basename(getwd()), "+
		"getOption('digits'), identical(first, again[1:2]))", in("a")), "a back")
	if got != `["a","a","a","a","a","a.txt","sub",3,true]` {
		t.Errorf("the first session, back: %s", got)
	}
	if got := value(w.run("set.seed(99); c(identical(b1, runif(1)), readLines('f.txt'), x)", in("b")), "b back"); got != `["TRUE","b","b"]` {
		t.Errorf("the second session, back: %s", got)
	}
	// a's stream goes on where a left it, whatever b drew meanwhile.
	if got := value(w.run("identical(runif(1), ref[4])", in("a")), "a stream"); got != "true" {
		t.Errorf("a's stream: %s", got)
	}
	// Dropping a forgets its environment and its stored files.
	if got := value(w.run("list.files('/sessions', recursive = TRUE)", in("b", "a")), "after drop"); got != "[]" {
		t.Errorf("after a was dropped the store holds %s", got)
	}
	if got := value(w.run("c(exists('x'), file.exists('f.txt'))", in("a")), "a again"); got != "[false,false]" {
		t.Errorf("a dropped then named again: %s, want a new session", got)
	}
}

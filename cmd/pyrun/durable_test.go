package main

// End-to-end tests of durable sessions (docs/sessions.md, Durable sessions):
// checkpoints in a dir: store, and a session that goes back to its last one
// when its worker is lost.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/redisrun"
)

// checkpointFiles are the session's records in a dir: store.
func checkpointFiles(t *testing.T, dir, id string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, id+"*.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitFor polls cond until it holds, or fails after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A session whose worker dies goes back to its last checkpoint: its values
// and files are those after the call the checkpoint covers, the result says
// so and names that call (structuredContent.checkpoint), later calls go on,
// and end_session deletes the checkpoints.
func TestSessionRollsBackToItsCheckpoint(t *testing.T) {
	store := t.TempDir()
	s := newServer(t, "--workers", "1", "--session-worker", "own", "--session-store", "dir:"+store, "--checkpoint-delay", "100ms")
	r := s.inSession(t, "new", "x = 41\nopen('notes.txt', 'w').write('kept')\nx")
	id := r.sc.SessionID
	waitFor(t, "the session's first checkpoint", 60*time.Second, func() bool {
		return len(checkpointFiles(t, store, id)) > 0
	})
	// Its worker dies in the middle of a call that changed the state.
	r = s.inSession(t, id, "x = 100\nopen('notes.txt', 'w').write('lost')\nimport js\njs.Deno.exit(3)")
	if r.sc.Status == "success" || r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 {
		t.Fatalf("the call whose worker died: status %s, checkpoint %+v, want a failure naming call 1\n%s", r.sc.Status, r.sc.Checkpoint, r.text)
	}
	if !strings.Contains(r.text, "continues from its checkpoint after call 1") {
		t.Errorf("the result does not say the session went back to call 1:\n%s", r.text)
	}
	r = s.inSession(t, id, "[x, open('notes.txt').read()]")
	if r.sc.Status != "success" || strings.Join(strings.Fields(string(r.sc.ReturnValue)), "") != `[41,"kept"]` || r.sc.Checkpoint != nil {
		t.Fatalf("after the rollback: %s %s %+v\n%s", r.sc.Status, r.sc.ReturnValue, r.sc.Checkpoint, r.text)
	}
	// Its worker killed while the session is idle: the next call goes on
	// from the checkpoint.
	pid := s.lastSessionWorkerPID(t)
	killPID(t, pid)
	waitFor(t, "pyrun to reap the killed worker", 30*time.Second, func() bool { return gonePID(pid) })
	r = s.inSession(t, id, "x")
	if r.sc.Status != "success" || string(r.sc.ReturnValue) != "41" || r.sc.Checkpoint == nil {
		t.Fatalf("the call after its worker was killed while idle: %s %s %+v\n%s", r.sc.Status, r.sc.ReturnValue, r.sc.Checkpoint, r.text)
	}
	s.inSession(t, id, "", "end_session", true)
	waitFor(t, "end_session deletes the checkpoints", 30*time.Second, func() bool {
		return len(checkpointFiles(t, store, id)) == 0
	})
}

// Without a store (--session-store none) nothing is written and a lost
// worker loses the session, as before checkpoints.
func TestSessionStoreNone(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", home)
	s := newServer(t, "--workers", "1", "--session-store", "none", "--checkpoint-delay", "100ms")
	r := s.inSession(t, "new", "x = 1")
	id := r.sc.SessionID
	s.inSession(t, id, "x += 1")
	r = s.inSession(t, id, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint != nil || !strings.Contains(r.text, "was lost") {
		t.Fatalf("a lost worker without a store: %+v\n%s", r.sc.Checkpoint, r.text)
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Errorf("--session-store none wrote to the state folder: %v", ents)
	}
}

// session_id "fork:ID" starts a new session as a copy of ID's state, files
// included; the two go their own ways. An unknown ID is a tool error.
func TestSessionFork(t *testing.T) {
	s := newServer(t, "--workers", "1", "--session-worker", "own", "--session-store", "dir:"+t.TempDir())
	a := s.inSession(t, "new", "x = [1]\nopen('f.txt', 'w').write('a')").sc.SessionID
	r := s.mustCall(t, map[string]any{"python_code": "x.append(2)\nopen('f.txt', 'a').write('b')\n[x, open('f.txt').read()]", "session_id": "fork:" + a})
	b := r.sc.SessionID
	if r.sc.Status != "success" || b == a || !sessionIDPattern.MatchString(b) {
		t.Fatalf("the fork: %s session %q (of %q)\n%s", r.sc.Status, b, a, r.text)
	}
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); got != `[[1,2],"ab"]` {
		t.Errorf("the fork's state %s", got)
	}
	r = s.inSession(t, a, "[x, open('f.txt').read()]")
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); got != `[[1],"a"]` {
		t.Errorf("the original after the fork %s", got)
	}
	s.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "fork:" + a + "0"}, "unknown")
}

// A pyrun started again with the same store (and instance id) continues
// the sessions of the one before: what their last calls left, files
// included, with the same ids; pyrun takes the checkpoint at shutdown.
func TestSessionsContinueAfterARestart(t *testing.T) {
	store := t.TempDir()
	restartContinues(t, "dir:"+store, func(id string) int { return len(checkpointFiles(t, store, id)) })
}

// The same through a redis:// store: Debian's redis-server on loopback.
func TestSessionsContinueAfterARestartThroughRedis(t *testing.T) {
	url, port := redisrun.Start(t)
	restartContinues(t, url, func(id string) int {
		out, _ := exec.Command("redis-cli", "-p", fmt.Sprint(port), "exists", "pyrun:ckpt:"+id).Output()
		return map[bool]int{true: 1, false: 0}[strings.TrimSpace(string(out)) == "1"]
	})
}

// A pyrun told to stop while a session's checkpoint is being taken lets
// it finish: the next pyrun continues the session (before, stopping
// called the checkpoint off, which left the worker unusable, and the
// session was lost at shutdown).
func TestStopDuringACheckpointKeepsTheSession(t *testing.T) {
	needBinary(t)
	store := t.TempDir()
	args := []string{"--workers", "1", "--session-worker", "own", "--session-store", "dir:" + store, "--instance-id", "box-8",
		"--checkpoint-delay", "100ms"}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	// A checkpoint takes seconds on a loaded machine: pyrun is given a
	// minute to exit.
	first, err := startServerFor(ctx, time.Minute, "", nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	id := first.inSession(t, "new", "x = 41").sc.SessionID
	first.inSession(t, id, "x += 1")
	if err := first.log.waitFor(ctx, "a checkpoint after the second call", func(c map[string]int) bool {
		return c["session checkpoint starts"] > 0
	}); err != nil {
		t.Fatal(err)
	}
	if err := first.session.Close(); err != nil {
		t.Fatalf("the first pyrun did not exit cleanly: %v\n%s", err, first.log.tail())
	}
	second := newServer(t, args...)
	r := second.inSession(t, id, "x")
	if r.sc.Status != "success" || valueOf(r) != "42" {
		t.Fatalf("the session after a stop during its checkpoint: %s %s, want 42\n%s", r.sc.Status, valueOf(r), r.text)
	}
}

// restartContinues runs a session in one pyrun with store, stops it, and
// continues the session in a second; records counts a session's records.
func restartContinues(t *testing.T, store string, records func(id string) int) {
	needBinary(t)
	args := []string{"--workers", "1", "--session-worker", "own", "--session-store", store, "--session-store-key-file", storeKeyFile(t), "--instance-id", "box-7",
		"--checkpoint-delay", "1h"} // only the shutdown's checkpoint
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	first, err := startServer(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	id := first.inSession(t, "new", "x = 41\nopen('notes.txt', 'w').write('kept')").sc.SessionID
	first.inSession(t, id, "x += 1")
	if err := first.session.Close(); err != nil {
		t.Fatalf("the first pyrun did not exit cleanly: %v\n%s", err, first.log.tail())
	}
	if records(id) == 0 {
		t.Fatalf("no checkpoint of %s after the first pyrun stopped", id)
	}

	second := newServer(t, args...)
	r := second.inSession(t, id, "[x, open('notes.txt').read()]")
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); r.sc.Status != "success" || got != `[42,"kept"]` {
		t.Fatalf("the session after a restart: %s %s\n%s", r.sc.Status, got, r.text)
	}
	second.inSession(t, id, "", "end_session", true)
	waitFor(t, "end_session deletes the checkpoints", 30*time.Second, func() bool {
		return records(id) == 0
	})
}

// A session that loaded native code is not durable: its checkpoint is
// refused, and when its worker dies the result says the state is lost and
// why there was no checkpoint.
func TestSessionWithNativeCodeIsNotDurable(t *testing.T) {
	s := newServer(t, "--workers", "1", "--session-worker", "own", "--session-store", "dir:"+t.TempDir(), "--checkpoint-delay", "100ms")
	id := s.inSession(t, "new", "import ctypes\ncb = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)\ncb()").sc.SessionID
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the refused checkpoint", func(c map[string]int) bool {
		return c["session is not durable"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	r := s.inSession(t, id, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint != nil || r.sc.Error == nil || !strings.Contains(*r.sc.Error, "was lost") || !strings.Contains(*r.sc.Error, "native code") {
		t.Fatalf("the lost call of a session that is not durable: %+v\n%s", r.sc.Checkpoint, r.text)
	}
}

// Sessions on one shared session worker (the default) are durable each on
// its own: a checkpoint is the whole worker's, taken after a call of one
// session and kept as that session's, and a session restores from its own
// record only, keeping its own namespace (values and files) and none of
// the others'. When the worker dies, a session whose last calls are
// covered continues where it was; one whose last call came after its
// checkpoint goes back to it and says so. A fork copies one namespace.
func TestSharedSessionsRestoreEachFromItsOwnCheckpoint(t *testing.T) {
	store := t.TempDir()
	s := newServer(t, "--workers", "1", "--session-store", "dir:"+store, "--checkpoint-delay", "100ms")
	a := s.inSession(t, "new", "x = 1\nopen('a.txt', 'w').write('A1')").sc.SessionID
	b := s.inSession(t, "new", "y = 2\nopen('b.txt', 'w').write('B2')").sc.SessionID
	// The files are written before pyrun logs each session's checkpoint:
	// both lines must be in before the count below, or a line of these
	// would pass for a's next checkpoint.
	waitFor(t, "both sessions' first checkpoints", 60*time.Second, func() bool {
		return len(checkpointFiles(t, store, a)) > 0 && len(checkpointFiles(t, store, b)) > 0 &&
			s.log.count("session checkpoint") >= 2
	})
	taken := s.log.count("session checkpoint")
	s.inSession(t, a, "x = 3\nopen('a.txt', 'w').write('A3')")
	waitFor(t, "a's checkpoint after its second call", 60*time.Second, func() bool {
		return s.log.count("session checkpoint") > taken
	})

	// A fork of a holds a's namespace only.
	r := s.mustCall(t, map[string]any{"session_id": "fork:" + a,
		"python_code": "import os\n[x, 'y' in globals(), sorted(os.listdir('.')), sorted(os.listdir('/sessions'))]"})
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); r.sc.Status != "success" || got != `[3,false,["a.txt"],[]]` {
		t.Fatalf("the fork of a shared session: %s %s, want a's values and files only\n%s", r.sc.Status, got, r.text)
	}

	// b's call kills the shared worker after changing b's state: b goes
	// back to its own checkpoint (after its call 1).
	r = s.inSession(t, b, "y = 20\nopen('b.txt', 'w').write('lost')\nimport js\njs.Deno.exit(3)")
	if r.sc.Status == "success" || r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 1 {
		t.Fatalf("b's call that killed the worker: status %s, checkpoint %+v, want a failure naming call 1\n%s", r.sc.Status, r.sc.Checkpoint, r.text)
	}
	if !strings.Contains(r.text, "continues from its checkpoint after call 1") {
		t.Errorf("b's result does not say it went back to call 1:\n%s", r.text)
	}
	// Each continues from its own checkpoint, with its own names and files
	// and none of the other's.
	peek := "import os\n[%s, open('%s.txt').read(), '%s' in globals(), os.path.exists('%s.txt'), sorted(os.listdir('/sessions'))]"
	r = s.inSession(t, a, fmt.Sprintf(peek, "x", "a", "y", "b"))
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); r.sc.Status != "success" || got != `[3,"A3",false,false,[]]` {
		t.Fatalf("a after the shared worker died: %s %s, want x = 3 and its file only\n%s", r.sc.Status, got, r.text)
	}
	if r.sc.Checkpoint == nil || r.sc.Checkpoint.AfterCall != 2 {
		t.Errorf("a's first call after the worker died names checkpoint %+v, want after call 2", r.sc.Checkpoint)
	}
	r = s.inSession(t, b, fmt.Sprintf(peek, "y", "b", "x", "a"))
	if got := strings.Join(strings.Fields(string(r.sc.ReturnValue)), ""); r.sc.Status != "success" || got != `[2,"B2",false,false,[]]` || r.sc.Checkpoint != nil {
		t.Fatalf("b after its rollback: %s %s %+v, want y = 2 and its file only\n%s", r.sc.Status, got, r.sc.Checkpoint, r.text)
	}
	// Both go on; a restored session's worker is a shared one of its
	// client's, which a new session may join, and sees none of its names.
	wantValue(t, s.inSession(t, a, "x += 1\nx"), "4")
	wantValue(t, s.inSession(t, "new", "'x' in globals() or 'y' in globals()"), "false")
}

// On a shared session worker --max-checkpoint bounds the worker's whole
// state: a session that grows it past the bound is not durable (the log
// says so, and its result when the worker is lost), while the record
// another session already has stays usable.
func TestSharedSessionPastMaxCheckpointIsNotDurable(t *testing.T) {
	store := t.TempDir()
	s := newServer(t, "--workers", "1", "--session-store", "dir:"+store, "--checkpoint-delay", "100ms", "--max-checkpoint", "32MiB")
	a := s.inSession(t, "new", "x = 1").sc.SessionID
	waitFor(t, "a's checkpoint", 60*time.Second, func() bool { return len(checkpointFiles(t, store, a)) > 0 })
	b := s.inSession(t, "new", "big = bytearray(b'z' * (16 << 20))\nlen(big)").sc.SessionID
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "b's refused checkpoint", func(c map[string]int) bool {
		return c["session is not durable"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	r := s.inSession(t, b, "import js\njs.Deno.exit(3)")
	if r.sc.Checkpoint != nil || r.sc.Error == nil || !strings.Contains(*r.sc.Error, "was lost") || !strings.Contains(*r.sc.Error, "--max-checkpoint") {
		t.Fatalf("the lost call of a session past --max-checkpoint: %+v\n%s", r.sc.Checkpoint, r.text)
	}
	r = s.inSession(t, a, "x")
	if r.sc.Status != "success" || string(r.sc.ReturnValue) != "1" || r.sc.Checkpoint == nil {
		t.Fatalf("a, whose record was kept before the worker grew: %s %s %+v\n%s", r.sc.Status, r.sc.ReturnValue, r.sc.Checkpoint, r.text)
	}
}

// A session with a large state, within every limit, keeps its worker and
// its state through its checkpoint: the checkpoint used to copy the
// worker's whole heap, the memory watch killed the worker for it, and the
// session was lost (issue 36).
func TestLargeSessionSurvivesItsCheckpoint(t *testing.T) {
	store := t.TempDir()
	s := newServer(t, "--workers", "1", "--session-worker", "own", "--memory-limit", "256MiB",
		"--session-store", "dir:"+store, "--checkpoint-delay", "100ms")
	const state = 96 << 20
	setup := fmt.Sprintf("import os\nx = bytearray(%d)\nfor i in range(0, len(x), 1 << 20): x[i:i + (1 << 20)] = os.urandom(1 << 20)\nlen(x)", state)
	id := s.inSession(t, "new", setup).sc.SessionID
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := s.log.waitFor(ctx, "the session's checkpoint, or its failure", func(c map[string]int) bool {
		return c["session checkpoint"]+c["session checkpoint failed"] >= 1
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.log.count("session checkpoint failed"); n > 0 {
		t.Errorf("the checkpoint failed (%d)", n)
	}
	if len(checkpointFiles(t, store, id)) == 0 {
		t.Error("the session has no checkpoint")
	}
	r := s.inSession(t, id, "len(x)")
	if r.sc.Status != "success" || string(r.sc.ReturnValue) != fmt.Sprint(state) || r.sc.Checkpoint != nil {
		t.Fatalf("the call after the checkpoint: %s %s %+v\n%s", r.sc.Status, r.sc.ReturnValue, r.sc.Checkpoint, r.text)
	}
}

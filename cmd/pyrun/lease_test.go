package main

// Several pyrun instances with one store (docs/sessions.md, "Several
// instances"): a session moves to the instance its call reaches, with its
// live state, and never is answered from a stale copy.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/redisrun"
)

// valueOf is a result's return value without spaces.
func valueOf(r result) string { return strings.Join(strings.Fields(string(r.sc.ReturnValue)), "") }

// Two live instances share a Redis store. A session started on A and
// called on B continues on B with the state of A's last call (A hands it
// over: no checkpoint was due yet), a later call on A sees what B did
// (it moved back), and once A has stopped, B continues it with A's last
// state.
func TestSessionMovesBetweenInstances(t *testing.T) {
	url, _ := redisrun.Start(t)
	keyFile := storeKeyFile(t)
	args := func(name string) []string {
		// No checkpoint after calls: only a hand-over or the shutdown
		// writes one, so a stale state would show.
		return []string{"--workers", "1", "--session-worker", "own", "--session-store", url, "--session-store-key-file", keyFile, "--instance-id", name,
			"--checkpoint-delay", "1h", "--session-lease", "2s", "--session-spares", "0", "--session-move-wait", "8s"}
	}
	a := newServer(t, args("box-a")...)
	b := newServer(t, args("box-b")...)

	id := a.inSession(t, "new", "x = 1\nopen('notes.txt', 'w').write('a')").sc.SessionID
	began := time.Now()
	a.inSession(t, id, "x += 1")
	local := time.Since(began)
	began = time.Now()
	r := b.inSession(t, id, "x += 10\nopen('notes.txt', 'a').write('b')\n[x, open('notes.txt').read()]")
	if r.sc.Status != "success" || valueOf(r) != `[12,"ab"]` {
		t.Fatalf("the call on B while A serves the session: %s %s, want [12,\"ab\"] (A's live state)\n%s", r.sc.Status, valueOf(r), r.text)
	}
	t.Logf("a call on the instance that serves the session: %s; on the other, with the hand-over and restore: %s",
		local.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if a.log.count("session handed over to another instance") != 1 || b.log.count("session moved here") != 1 {
		t.Errorf("A handed over %d times, B took over %d times; want 1 each",
			a.log.count("session handed over to another instance"), b.log.count("session moved here"))
	}
	r = a.inSession(t, id, "x += 100\n[x, open('notes.txt').read()]")
	if r.sc.Status != "success" || valueOf(r) != `[112,"ab"]` {
		t.Fatalf("the next call on A: %s %s, want [112,\"ab\"] (B's state, not A's stale one)\n%s", r.sc.Status, valueOf(r), r.text)
	}
	// Calls on both at once: one waits for the other (a hand-over waits
	// for the running call), and neither's update is lost.
	done := make(chan result, 1)
	go func() {
		r, err := a.call(t.Context(), map[string]any{"python_code": "import time\ntime.sleep(2)\nx += 1000\nx", "session_id": id})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	onB := valueOf(b.inSession(t, id, "x += 1\nx"))
	onA := valueOf(<-done)
	if !(onA == "1112" && onB == "1113" || onB == "113" && onA == "1113") {
		t.Fatalf("calls at once on A and B returned %s and %s: an update was lost", onA, onB)
	}
	// A session that cannot move (native code: not durable) stays where
	// it is, and a call elsewhere says so once the wait is over.
	nd := a.inSession(t, "new", "import ctypes\ncb = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)\nv = cb()").sc.SessionID
	b.sessionToolError(t, map[string]any{"python_code": "v", "session_id": nd}, "serves", "did not hand it over within 8s")
	wantValue(t, a.inSession(t, nd, "v"), "1")

	// A stops (a rolling restart): its shutdown checkpoint and released
	// lease let B continue at once.
	if err := a.session.Close(); err != nil {
		t.Fatalf("A did not exit cleanly: %v\n%s", err, a.log.tail())
	}
	r = b.inSession(t, id, "x")
	if r.sc.Status != "success" || valueOf(r) != "1113" {
		t.Fatalf("the call on B after A stopped: %s %s, want 1113\n%s", r.sc.Status, valueOf(r), r.text)
	}
	// Another client's id is refused as before; an id no store knows of
	// another instance says which instance made it.
	b.sessionToolError(t, map[string]any{"python_code": "1", "session_id": "box-c.0123456789abcdef0123456789abcdef"}, "box-c")
}

// A session left in a shared store by an instance that never comes back
// is deleted by another once it is past its lifetime, as its own instance
// would have.
func TestSessionOfAGoneInstanceExpires(t *testing.T) {
	url, port := redisrun.Start(t)
	keyFile := storeKeyFile(t)
	exists := func(id string) bool {
		out, _ := exec.Command("redis-cli", "-p", fmt.Sprint(port), "exists", "pyrun:ckpt:"+id).Output()
		return strings.TrimSpace(string(out)) == "1"
	}
	args := []string{"--workers", "1", "--session-worker", "own", "--session-store", url, "--session-store-key-file", keyFile, "--checkpoint-delay", "1h", "--session-idle", "3s"}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	gone, err := startServer(ctx, append(args, "--instance-id", "box-gone")...)
	if err != nil {
		t.Fatal(err)
	}
	id := gone.inSession(t, "new", "x = 1").sc.SessionID
	if err := gone.session.Close(); err != nil {
		t.Fatalf("the first pyrun did not exit cleanly: %v\n%s", err, gone.log.tail())
	}
	if !exists(id) {
		t.Fatalf("no checkpoint of %s after its pyrun stopped", id)
	}
	other := newServer(t, append(args, "--instance-id", "box-other")...)
	waitFor(t, "the gone instance's session to expire from the store", 30*time.Second, func() bool { return !exists(id) })
	other.sessionToolError(t, map[string]any{"python_code": "x", "session_id": id}, "box-gone")

	// An instance killed holds its session's lease until it runs out,
	// past the session's idle limit here: the other instance's sweep, which
	// cannot take the lease when the session expires, looks again once it
	// has run out (before, it gave up, and the record stayed for good).
	killedArgs := []string{"--workers", "1", "--session-worker", "own", "--session-store", url, "--session-store-key-file", keyFile,
		"--checkpoint-delay", "100ms", "--session-idle", "2s", "--session-lease", "6s"}
	kid := sessionOfAKilledInstance(t, ctx, "x = 2", append(killedArgs, "--instance-id", "box-killed")...)
	newServer(t, append(killedArgs, "--instance-id", "box-sweeper")...)
	waitFor(t, "the killed instance's session to expire from the store", 30*time.Second, func() bool { return !exists(kid) })
}

// An instance that dies (SIGKILL: no final checkpoint, no release) leaves
// its sessions' leases to expire; another instance then continues them
// from their last checkpoint.
func TestSessionOfADeadInstanceContinues(t *testing.T) {
	url, _ := redisrun.Start(t)
	keyFile := storeKeyFile(t)
	args := []string{"--workers", "1", "--session-worker", "own", "--session-store", url, "--session-store-key-file", keyFile, "--checkpoint-delay", "100ms", "--session-lease", "2s"}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	id := sessionOfAKilledInstance(t, ctx, "x = 5", append(args, "--instance-id", "box-dead")...)
	other := newServer(t, append(args, "--instance-id", "box-live")...)
	r := other.inSession(t, id, "x")
	if r.sc.Status != "success" || valueOf(r) != "5" {
		t.Fatalf("the session of a dead instance: %s %s, want 5\n%s", r.sc.Status, valueOf(r), r.text)
	}
}

// A session on a shared worker (the default) moves as well: its worker's
// checkpoint, marked with its namespace, continues it on the other
// instance.
func TestSharedWorkerSessionMoves(t *testing.T) {
	url, _ := redisrun.Start(t)
	keyFile := storeKeyFile(t)
	args := []string{"--workers", "1", "--session-store", url, "--session-store-key-file", keyFile, "--checkpoint-delay", "1h", "--session-lease", "2s"}
	a := newServer(t, append(args, "--instance-id", "box-a")...)
	b := newServer(t, append(args, "--instance-id", "box-b")...)
	id := a.inSession(t, "new", "x = 1").sc.SessionID
	a.inSession(t, id, "x += 1")
	wantValue(t, b.inSession(t, id, "x += 10\nx"), "12")
	wantValue(t, a.inSession(t, id, "x += 100\nx"), "112")
}

// A pyrun killed (no final checkpoint, no release) and started again with
// the same store and instance id takes its predecessor's leases at once,
// the process that held them being gone: the session continues from its
// last checkpoint without waiting for the lease (here a minute) to
// expire. Before, the call waited out --session-move-wait and failed.
func TestRestartAfterAKillTakesTheDeadProcesssLeases(t *testing.T) {
	needBinary(t)
	store := t.TempDir()
	args := []string{"--workers", "1", "--session-worker", "own", "--session-store", "dir:" + store, "--instance-id", "box-k",
		"--checkpoint-delay", "100ms", "--session-lease", "1m", "--session-move-wait", "40s"}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	killed, err := startServer(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	id := killed.inSession(t, "new", "x = 5").sc.SessionID
	if err := killed.log.waitFor(ctx, "the session's checkpoint", func(c map[string]int) bool {
		return c["session checkpoint"] > 0
	}); err != nil {
		t.Fatal(err)
	}
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.session.Close() // its process is gone
	again := newServer(t, args...)
	began := time.Now()
	r := again.inSession(t, id, "x")
	took := time.Since(began)
	if r.sc.Status != "success" || valueOf(r) != "5" {
		t.Fatalf("the session after the kill and a restart: %s %s, want 5\n%s", r.sc.Status, valueOf(r), r.text)
	}
	if took > 30*time.Second {
		t.Errorf("the first call after the restart took %s: it waited for the dead process's lease", took)
	}
	if again.log.count("took a python session's lease from this instance's previous process, which is gone") != 1 {
		t.Errorf("the log does not say the lease was taken from the gone process")
	}
	t.Logf("the first call after the kill and restart: %s", took.Round(time.Millisecond))
}

// sessionOfAKilledInstance starts pyrun with args, makes a session that
// runs code, waits for its checkpoint and kills pyrun (SIGKILL: no final
// checkpoint, no lease released). It returns the session's id.
func sessionOfAKilledInstance(t *testing.T, ctx context.Context, code string, args ...string) string {
	t.Helper()
	s, err := startServer(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	id := s.inSession(t, "new", code).sc.SessionID
	if err := s.log.waitFor(ctx, "the session's checkpoint", func(c map[string]int) bool {
		return c["session checkpoint"] > 0
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = s.session.Close() // its process is gone
	return id
}

package main

// End-to-end tests of durable sessions (docs/sessions.md, Durable sessions):
// checkpoints in a dir: store, and a session that goes back to its last one
// when its worker is lost.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	s := newServer(t, "--workers", "1", "--session-store", "dir:"+store, "--checkpoint-delay", "100ms")
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

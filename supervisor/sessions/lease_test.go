package sessions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// A session whose every record in the store fails its checks (here its
// checksum) is not answered as unknown, which would read as a mistyped
// id: the call says its checkpoint is damaged and its state lost. Its
// records stay, for whoever looks into the damage. Control: another
// session of the same store continues, and an id the store does not know
// is still unknown.
func TestDamagedCheckpointSaysTheStateIsLost(t *testing.T) {
	pool := checkpointingPool(t)
	dir := t.TempDir()
	m, _ := durableOn(t, pool, dir, time.Hour) // only the ones taken when it closes
	a := callAs(t, m, "anonymous", sessions.NewSession, "x = 'a'").SessionID
	b := callAs(t, m, "anonymous", sessions.NewSession, "x = 'b'").SessionID
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _ := filepath.Glob(filepath.Join(dir, a+"*.ckpt"))
	if len(recs) == 0 {
		t.Fatalf("no record of %s after the close", a)
	}
	for _, p := range recs {
		damage(t, p)
	}

	again, _ := durableOn(t, pool, dir, time.Hour)
	t.Cleanup(func() { _ = again.Close(context.Background()) })
	_, err := again.Run(t.Context(), sessions.Call{Session: a, Job: supervisor.Job{ID: "a", Code: "x", Client: "anonymous"}}, nil)
	if !errors.Is(err, sessions.ErrLost) || errors.Is(err, sessions.ErrUnknown) ||
		!strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "state is lost") {
		t.Errorf("a call to the session whose records are damaged: %v; want ErrLost saying its checkpoint is damaged and its state lost", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, a+"*.ckpt")); len(left) != len(recs) {
		t.Errorf("the damaged records after the call: %v, want them kept (%v)", left, recs)
	}
	if got := compact(callAs(t, again, "anonymous", b, "x").Value); got != `"b"` {
		t.Errorf("the intact session of the same store: %s, want \"b\"", got)
	}
	unknown := "test-1.0123456789abcdef0123456789abcdef"
	_, err = again.Run(t.Context(), sessions.Call{Session: unknown, Job: supervisor.Job{ID: "u", Code: "x", Client: "anonymous"}}, nil)
	if !errors.Is(err, sessions.ErrUnknown) {
		t.Errorf("an id the store does not know: %v, want ErrUnknown", err)
	}
}

// damage flips a byte in the middle of the file at path.
func damage(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

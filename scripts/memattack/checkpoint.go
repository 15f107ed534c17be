package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/internal/procfs"
	"github.com/pyrun/pyrun/internal/pyrunserve"
)

// checkpointFlags are pyrun's flags for the checkpoint attack: sessions on
// workers of their own, with room for their state, kept in a dir: store
// in dir, checkpointed 100 ms after their call.
func checkpointFlags(c Config, dir string) []string {
	state := max(c.StateMiB, 1)
	return []string{"--session-worker", "own", "--session-store", "dir:" + filepath.Join(dir, "store"),
		"--checkpoint-delay", "100ms", "--memory-limit", strconv.Itoa(2*state+256) + "MiB",
		"--max-session-workers", strconv.Itoa(max(c.Sessions, 1) + 1)}
}

// attackCheckpoint: c.Sessions sessions, each filling c.StateMiB MiB with
// random bytes at once; all are checkpointed together once their calls
// end. It waits for every session's record in the store, then calls each
// once more: its state must be there.
func attackCheckpoint(ctx context.Context, c Config, srv *pyrunserve.Server, dir string, rep *Report) ([]string, error) {
	n, state := max(c.Sessions, 1), max(c.StateMiB, 1)
	code := fmt.Sprintf("import os\nx = bytearray(%d << 20)\nfor i in range(%d): x[i << 20:(i + 1) << 20] = os.urandom(1 << 20)\nlen(x)", state, state)
	cs, err := connect(ctx, c, srv)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			atomic.AddInt64(&rep.Sent, 1)
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code",
				Arguments: map[string]any{"python_code": code, "session_id": "new"}})
			var sc struct {
				Status    string `json:"status"`
				SessionID string `json:"session_id"`
			}
			if err == nil {
				raw, _ := json.Marshal(res.StructuredContent)
				err = json.Unmarshal(raw, &sc)
			}
			if err != nil || sc.Status != "success" {
				atomic.AddInt64(&rep.Lost, 1)
				rep.example("lost: a session's first call: %v %s", err, sc.Status)
				return
			}
			atomic.AddInt64(&rep.Results, 1)
			ids[i] = sc.SessionID
		})
	}
	wg.Wait()
	store := filepath.Join(dir, "store")
	deadline := time.Now().Add(c.CallTimeout)
	for _, id := range ids {
		if id == "" {
			continue
		}
		for {
			if m, _ := filepath.Glob(filepath.Join(store, id+"*.ckpt")); len(m) > 0 {
				break
			}
			if time.Now().After(deadline) {
				atomic.AddInt64(&rep.Sent, 1) // counted as a call that got no answer
				atomic.AddInt64(&rep.Lost, 1)
				rep.example("lost: no checkpoint of session %s within %s", id, c.CallTimeout)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	want := strconv.Itoa(state << 20)
	for _, id := range ids {
		if id == "" {
			continue
		}
		checkState(ctx, cs, id, want, "after its checkpoint", rep)
	}
	return ids, nil
}

// attackIncrement: each session of the checkpoint attack changes 8 bytes
// of its state, and is checkpointed again: an increment against its last
// record (issue 37, item 3). pyrun's peak RSS is counted from here on
// (VmHWM reset), until every session has its new record.
func attackIncrement(ctx context.Context, c Config, srv *pyrunserve.Server, dir string, ids []string, rep *Report) error {
	pid := srv.Cmd.Process.Pid
	rep.PeakRSSMiB = float64(hwm(pid)) / (1 << 20) // the attack's peak so far
	store := filepath.Join(dir, "store")
	before := map[string]time.Time{}
	for _, id := range ids {
		if st, err := os.Stat(filepath.Join(store, id+".ckpt")); err == nil {
			before[id] = st.ModTime()
		}
	}
	// The checkpoints' records are let go just after they are in the
	// store (the Keeper maps each while it writes it): a moment for that.
	time.Sleep(time.Second)
	// 5: the peak resident set is set to the present one (proc(5)).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset pyrun's peak RSS: %w", err)
	}
	rss, _ := procfs.Status(pid, "VmRSS")
	rep.IncrementBaseRSSMiB = float64(rss) / (1 << 20)
	cs, err := connect(ctx, c, srv)
	if err != nil {
		return err
	}
	defer cs.Close()
	for _, id := range ids {
		if id != "" {
			callTool(ctx, c, cs, map[string]any{"python_code": "x[:8] = os.urandom(8)", "session_id": id}, rep)
		}
	}
	deadline := time.Now().Add(c.CallTimeout)
	for _, id := range ids {
		for id != "" {
			st, err := os.Stat(filepath.Join(store, id+".ckpt"))
			if err == nil && st.ModTime().After(before[id]) {
				rep.StoredMiB += float64(st.Size()) / (1 << 20)
				break
			}
			if time.Now().After(deadline) {
				atomic.AddInt64(&rep.Sent, 1)
				atomic.AddInt64(&rep.Lost, 1)
				rep.example("lost: no new checkpoint of session %s within %s", id, c.CallTimeout)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rep.IncrementPeakRSSMiB = float64(hwm(pid)) / (1 << 20)
	return nil
}

// attackRestore: pyrun is stopped and started again on the same store,
// and each session of the checkpoint attack is called at once: each is
// restored from its record (a restart, as after a crash or an upgrade).
// The new pyrun's peak RSS is the restores'.
func attackRestore(ctx context.Context, c Config, dir string, ids []string, rep *Report) error {
	srv, err := startServe(ctx, c, dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	cs, err := connect(ctx, c, srv)
	if err != nil {
		return err
	}
	defer cs.Close()
	want := strconv.Itoa(max(c.StateMiB, 1) << 20)
	var wg sync.WaitGroup
	for _, id := range ids {
		if id == "" {
			continue
		}
		wg.Go(func() { checkState(ctx, cs, id, want, "after pyrun's restart", rep) })
	}
	wg.Wait()
	rep.RestorePeakRSSMiB = float64(hwm(srv.Cmd.Process.Pid)) / (1 << 20)
	return nil
}

// checkState calls session id for len(x), which must be want; one that is
// not counts as lost, with when it was asked.
func checkState(ctx context.Context, cs *sdk.ClientSession, id, want, when string, rep *Report) {
	atomic.AddInt64(&rep.Sent, 1)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_python_code",
		Arguments: map[string]any{"python_code": "len(x)", "session_id": id}})
	var sc struct {
		ReturnValue json.RawMessage `json:"return_value"`
	}
	if err == nil && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &sc)
	}
	if string(sc.ReturnValue) != want {
		atomic.AddInt64(&rep.Lost, 1)
		rep.example("lost: session %s %s: %v %s", id, when, err, sc.ReturnValue)
		return
	}
	atomic.AddInt64(&rep.Results, 1)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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
func attackCheckpoint(ctx context.Context, c Config, srv *pyrunserve.Server, dir string, rep *Report) error {
	n, state := max(c.Sessions, 1), max(c.StateMiB, 1)
	code := fmt.Sprintf("import os\nx = bytearray(%d << 20)\nfor i in range(%d): x[i << 20:(i + 1) << 20] = os.urandom(1 << 20)\nlen(x)", state, state)
	cs, err := connect(ctx, c, srv)
	if err != nil {
		return err
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
			rep.example("lost: session %s after its checkpoint: %v %s", id, err, sc.ReturnValue)
			continue
		}
		atomic.AddInt64(&rep.Results, 1)
	}
	return nil
}

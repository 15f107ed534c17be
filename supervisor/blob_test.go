package supervisor_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// fakeCheckpointMiB is the size of the fake worker's checkpoint.
const fakeCheckpointMiB = 8

func init() {
	// "checkpointer" answers runs as "echo" does, and a checkpoint request
	// with fakeCheckpointMiB MiB of bytes (PYRUN_FAKE_CKPT: "whole"), half
	// of them and then nothing more ("stall"), or half and its exit
	// ("cut").
	fakeModes["checkpointer"] = func() {
		fakeReady()
		how := os.Getenv("PYRUN_FAKE_CKPT")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var req map[string]any
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				continue
			}
			switch req["type"] {
			case "run":
				fakeEcho(req)
			case "checkpoint":
				n := fakeCheckpointMiB << 20
				fakeSend(map[string]any{"type": "checkpoint", "id": req["id"], "mem": n - 100, "fs": 100, "clock": 1})
				chunk := bytes.Repeat([]byte{7}, 1<<20)
				for i := range fakeCheckpointMiB {
					if how != "whole" && i == fakeCheckpointMiB/2 {
						if how == "cut" {
							os.Exit(3)
						}
						blockForever()
					}
					os.Stdout.Write(chunk)
				}
			}
		}
	}
}

// A checkpoint's bytes come to the one who takes it straight from the
// worker's pipe; what it leaves unread is drained, its error is the
// checkpoint's, and the worker goes on.
func TestCheckpointLeftUnreadIsDrained(t *testing.T) {
	p := fakePool(t, "checkpointer", supervisor.Config{Workers: 1}, "PYRUN_FAKE_CKPT=whole")
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	stop := errors.New("the store is full")
	err = d.Checkpoint(t.Context(), func(img *supervisor.Image) error {
		if img.Mem+img.FS != fakeCheckpointMiB<<20 || img.Clock != 1 {
			t.Errorf("checkpoint of %d + %d bytes at %v", img.Mem, img.FS, img.Clock)
		}
		if _, err := io.ReadFull(img.R, make([]byte, 100)); err != nil {
			t.Error(err)
		}
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("checkpoint: %v, want the taker's error", err)
	}
	if why := d.Lost(); why != "" {
		t.Fatalf("the worker is lost: %s", why)
	}
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "after"}, nil); err != nil || res.Value != `"after"` {
		t.Fatalf("the call after the checkpoint: %v %+v", err, res)
	}
	// Read whole, the next one is the worker's bytes, all of them.
	var got []byte
	err = d.Checkpoint(t.Context(), func(img *supervisor.Image) error {
		got, err = io.ReadAll(img.R)
		return err
	})
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, fakeCheckpointMiB<<20)) {
		t.Fatalf("checkpoint read whole: %d bytes, %v", len(got), err)
	}
}

// The time the taker takes is its own: only the reads' waits for the
// worker count against the checkpoint's time limit.
func TestCheckpointTakerMayBeSlow(t *testing.T) {
	supervisor.SetCheckpointTimeout(t, 300*time.Millisecond)
	p := fakePool(t, "checkpointer", supervisor.Config{Workers: 1}, "PYRUN_FAKE_CKPT=whole")
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	err = d.Checkpoint(t.Context(), func(img *supervisor.Image) error {
		buf := make([]byte, 1<<20)
		for {
			time.Sleep(100 * time.Millisecond) // 800 ms in all
			if _, err := io.ReadFull(img.R, buf); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
		}
	})
	if err != nil || d.Lost() != "" {
		t.Fatalf("a slow taker: %v, worker lost: %q", err, d.Lost())
	}
}

// A worker that stops sending its checkpoint's bytes, or ends in their
// middle, is lost, and the taker's reads fail rather than wait.
func TestCheckpointBrokenOffLosesTheWorker(t *testing.T) {
	supervisor.SetCheckpointTimeout(t, 500*time.Millisecond)
	for _, how := range []string{"stall", "cut"} {
		t.Run(how, func(t *testing.T) {
			p := fakePool(t, "checkpointer", supervisor.Config{Workers: 1}, "PYRUN_FAKE_CKPT="+how)
			d, err := p.StartDedicated(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			start := time.Now()
			var readErr error
			err = d.Checkpoint(t.Context(), func(img *supervisor.Image) error {
				_, readErr = io.Copy(io.Discard, img.R)
				return readErr
			})
			within(t, "the broken checkpoint", time.Since(start), 0, 5*time.Second)
			want := map[string]string{"stall": "did not come within", "cut": "ended " + strconv.Itoa(fakeCheckpointMiB<<19) + " bytes early"}[how]
			if !errors.Is(err, supervisor.ErrWorkerLost) || readErr == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("checkpoint: %v (read: %v), want ErrWorkerLost saying %q", err, readErr, want)
			}
			if d.Lost() == "" {
				t.Fatal("the worker is not lost")
			}
		})
	}
}

// A checkpoint past --max-checkpoint is drained and refused: the worker
// goes on.
func TestCheckpointPastItsBoundIsRefused(t *testing.T) {
	p := fakePool(t, "checkpointer", supervisor.Config{Workers: 1, MaxCheckpoint: 1 << 20}, "PYRUN_FAKE_CKPT=whole")
	d, err := p.StartDedicated(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	err = d.Checkpoint(t.Context(), func(*supervisor.Image) error { return fmt.Errorf("given") })
	if !errors.Is(err, supervisor.ErrNotDurable) || !strings.Contains(err.Error(), "--max-checkpoint") {
		t.Fatalf("checkpoint: %v, want ErrNotDurable naming --max-checkpoint", err)
	}
	if res, err := d.Run(t.Context(), supervisor.Job{ID: "1", Code: "after"}, nil); err != nil || res.Value != `"after"` {
		t.Fatalf("the call after the checkpoint: %v %+v", err, res)
	}
}

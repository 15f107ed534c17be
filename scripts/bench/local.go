//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// localReport times `pyrun stdio` attached to a running service (docs/contract.md
// section 16) against `pyrun stdio` with a pool of its own, each from
// process start to the first `1 + 1` result, in one run, beside the bare
// worker's round trip (the floor).
type localReport struct {
	Runs int `json:"runs"`
	// AttachedMS is spawn to first result with the service up; its
	// handshake part is the MCP initialize through the bridge.
	Attached          *series `json:"attached"`
	AttachedHandshake float64 `json:"attached_handshake_ms"`
	OwnPool           *series `json:"own_pool"`
	// AttachedOverOwn is the ratio of the p50s (target <= 0.1).
	AttachedOverOwn float64 `json:"attached_over_own_pool"`
	FloorP50MS      float64 `json:"floor_p50_ms"`
}

// localCode is the first call's code, as a client's first call might be.
const localCode = "1 + 1"

func benchLocal(ctx context.Context, o *opts, floorP50 float64) (*localReport, error) {
	r := &localReport{Runs: o.runs, FloorP50MS: floorP50}
	// pyrun stdio with a pool of its own (startPyrun never attaches
	// unless told to).
	var own []time.Duration
	for range o.runs {
		p, err := startPyrun(ctx, o, "warn")
		if err != nil {
			return nil, err
		}
		_, err = p.call(ctx, localCode, nil)
		own = append(own, time.Since(p.started))
		p.close()
		if err != nil {
			return nil, err
		}
	}
	r.OwnPool = newSeries(own)

	stop, sock, err := startService(ctx, o)
	if err != nil {
		return nil, err
	}
	defer stop()
	// The service's workers ready and past their first calls, as a service
	// that has been up a while is.
	warm, err := startPyrun(ctx, o, "warn", "--attach", "required", "--socket", sock)
	if err != nil {
		return nil, err
	}
	for range 50 {
		if _, err := warm.call(ctx, localCode, nil); err != nil {
			warm.close()
			return nil, err
		}
	}
	warm.close()

	// More runs than the start-ups get: each is short.
	var attached, handshakes []time.Duration
	for range max(o.runs, 20) {
		p, err := startPyrun(ctx, o, "warn", "--attach", "required", "--socket", sock)
		if err != nil {
			return nil, err
		}
		handshake := time.Since(p.started)
		_, err = p.call(ctx, localCode, nil)
		d := time.Since(p.started)
		p.close()
		if err != nil {
			return nil, err
		}
		attached, handshakes = append(attached, d), append(handshakes, handshake)
	}
	r.Attached = newSeries(attached)
	r.AttachedHandshake = newSeries(handshakes).P50MS
	r.AttachedOverOwn = round3(r.Attached.P50MS / r.OwnPool.P50MS)
	return r, nil
}

// startService starts `pyrun serve --socket` (no HTTP) on two workers in a
// folder of its own, and returns its socket once it listens.
func startService(ctx context.Context, o *opts) (stop func(), sock string, err error) {
	dir, err := os.MkdirTemp("", "pyrun-bench-local-")
	if err != nil {
		return nil, "", err
	}
	sock = filepath.Join(dir, "pyrun.sock")
	cmd := exec.Command(o.bin, "serve", "--socket", sock, "--listen", "none", "--workers", "2",
		"--log-format", "json", "--log-level", "debug", "--runtime-dir", o.runtimeDir)
	lw := newLogWatcher()
	cmd.Stderr = lw
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	if err := lw.waitAlive(ctx, 2); err != nil {
		stop()
		return nil, "", fmt.Errorf("pyrun serve --socket: %w", err)
	}
	return stop, sock, nil
}

func printLocal(w io.Writer, l *localReport) {
	fmt.Fprintf(w, "\nlocal service: pyrun stdio spawn to the first %q result (median of %d runs)\n", localCode, l.Attached.Runs)
	fmt.Fprintf(w, "  attached to pyrun serve --socket: p50 %.1f ms (min %.1f, max %.1f; the handshake through the bridge %.1f ms)\n",
		l.Attached.P50MS, l.Attached.MinMS, l.Attached.MaxMS, l.AttachedHandshake)
	fmt.Fprintf(w, "  with a pool of its own (--attach never): p50 %.1f ms (min %.1f, max %.1f; %d runs)\n",
		l.OwnPool.P50MS, l.OwnPool.MinMS, l.OwnPool.MaxMS, l.OwnPool.Runs)
	fmt.Fprintf(w, "  attached / own pool %.3fx; the bare worker's round trip (floor) p50 %.3f ms\n", l.AttachedOverOwn, l.FloorP50MS)
}

package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// TestIdleWorkerKilledFromOutsideIsReplaced kills an idle worker the way
// the kernel's OOM killer or an operator would: the pool replaces it
// without waiting for a call to find it dead (at once, through the
// worker's exit; the health check would also see it within its interval).
func TestIdleWorkerKilledFromOutsideIsReplaced(t *testing.T) {
	// A worker that says it is ready and then idles.
	script := fmt.Sprintf(`printf '{"type":"ready","engine":"python","protocol":%d}\n'; exec sleep 600`, protocolVersion)
	p := newPool(Python, func(Config, launch) (*exec.Cmd, error) {
		return exec.Command("/bin/sh", "-c", script), nil
	}, nil, nil, nil, nil, Config{Workers: 1}, logFor(t))
	CloseAtEnd(t, p)
	idle := func() *worker {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.idle) == 1 {
			return p.idle[0]
		}
		return nil
	}
	WaitUntil(t, func() bool { return idle() != nil })
	first := idle()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	WaitUntil(t, func() bool { w := idle(); return w != nil && w != first })
	s := p.Stats()
	if s.Counts.Restarts[RestartCrash] != 1 || s.Counts.Starts["plain"] != 2 {
		t.Errorf("restarts %v, starts %v; want the dead worker retired and one more started", s.Counts.Restarts, s.Counts.Starts)
	}
}

// TestPoolDoesNotUseACorruptSnapshot gives a new pool a snapshot whose
// description is intact but whose bytes are not: the first start, which
// checks them while its process boots, is called off, and the next start
// comes from a snapshot made anew.
func TestPoolDoesNotUseACorruptSnapshot(t *testing.T) {
	// A stand-in Deno: a maker writes random bytes, a worker says it is
	// ready (from its snapshot, when given one) and idles.
	rt := fakeRuntime(t, fmt.Sprintf(`case "$*" in
*make_snapshot*) head -c 4096 /dev/urandom ;;
*snapshot*) printf '{"type":"ready","engine":"python","protocol":%[1]d,"snapshot":true}\n'; exec sleep 600 ;;
*) printf '{"type":"ready","engine":"python","protocol":%[1]d}\n'; exec sleep 600 ;;
esac`, protocolVersion))
	made, err := EnsureSnapshot(t.Context(), rt, noWall, logFor(t))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(made.Path)
	body[100] ^= 0xff
	replaceFile(t, made.Path, body)

	p, err := NewPool(rt, Config{Workers: 1, OSSandbox: oswall.ModeOff}, logFor(t))
	if err != nil {
		t.Fatal(err)
	}
	CloseAtEnd(t, p)
	WaitUntil(t, func() bool { return p.Stats().Ready == 1 })
	if s := p.Stats(); s.Counts.Starts["snapshot"] != 1 || s.Counts.Starts["plain"] != 0 {
		t.Errorf("starts %v, want one from the snapshot", s.Counts.Starts)
	}
	remade, err := openSnapshot(rt)
	if err != nil || remade.SHA256 == made.SHA256 {
		t.Errorf("the snapshot on disk: %v, checksum %s; want a sound one made anew", err, remade.SHA256)
	}
}

// TestStartsKilledFromOutsideKeepTheSnapshot: workers killed while they
// start from the snapshot (by an administrator, the OOM killer, a soak
// test) say nothing about the snapshot, and the pool keeps starting from it.
func TestStartsKilledFromOutsideKeepTheSnapshot(t *testing.T) {
	rt := fakeRuntime(t, makerWrites(50_000))
	ready := fmt.Sprintf(`printf '{"type":"ready","engine":"python","protocol":%d,"snapshot":true}\n'; exec sleep 600`, protocolVersion)
	var mu sync.Mutex
	var withSnapshot []bool
	p := newPool(Python, func(_ Config, l launch) (*exec.Cmd, error) {
		mu.Lock()
		defer mu.Unlock()
		withSnapshot = append(withSnapshot, l.snapshot != nil)
		if len(withSnapshot) <= 3 {
			return exec.Command("/bin/sh", "-c", "kill -9 $$"), nil
		}
		return exec.Command("/bin/sh", "-c", ready), nil
	}, newSnapshots(rt, logFor(t)), nil, nil, nil, Config{Workers: 1, OSSandbox: oswall.ModeOff}, logFor(t))
	CloseAtEnd(t, p)
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().Ready == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no worker became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, snap := range withSnapshot {
		if !snap {
			t.Errorf("start %d of %d was plain; every start should use the snapshot", i+1, len(withSnapshot))
		}
	}
}

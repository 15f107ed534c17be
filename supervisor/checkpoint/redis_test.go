package checkpoint

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/internal/testtier"
)

// startRedis runs Debian's redis-server on a free loopback port for the
// test, without persistence.
func startRedis(t *testing.T) string {
	t.Helper()
	testtier.Needs(t, "redis-server")
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (Debian package redis-server; .ci/run installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not listen: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The Redis store keeps a latest and a previous record as the folder
// store does: a damaged latest gives the previous.
func TestRedisKeepsAnOlderIntactCheckpoint(t *testing.T) {
	ctx := context.Background()
	store, err := OpenRedis(ctx, startRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k := &Keeper{store: store, max: 1 << 30, log: hclog.NewNullLogger()}
	for call := 1; call <= 2; call++ {
		rec, err := Encode(Meta{Session: "box.1", AfterCall: call}, fakeMem([]byte("heap")), nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, "box.1", rec); err != nil {
			t.Fatal(err)
		}
	}
	if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 2 {
		t.Fatalf("load: %+v %v", m, err)
	}
	if err := store.c.Set(ctx, redisLatest+"box.1", "damaged", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if m, _, err := k.Load(ctx, "box.1"); err != nil || m.AfterCall != 1 {
		t.Fatalf("load with a damaged latest: %+v %v, want the older call 1", m, err)
	}
	if keys, err := store.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "box.1" {
		t.Errorf("keys %v %v", keys, err)
	}
	saved, err := k.List(ctx)
	if err != nil || len(saved) != 1 || saved[0].AfterCall != 1 {
		t.Errorf("list %+v %v", saved, err)
	}
	if err := store.Delete(ctx, "box.1"); err != nil {
		t.Fatal(err)
	}
	if l, p, err := store.Get(ctx, "box.1"); l != nil || p != nil || err != nil {
		t.Errorf("after delete: %d %d %v", len(l), len(p), err)
	}
	if _, err := OpenRedis(ctx, "redis://127.0.0.1:1/0"); err == nil {
		t.Error("a store that does not answer opened")
	}
}

package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/internal/redisrun"
)

// startRedis runs redis-server for the test and returns its URL.
func startRedis(t *testing.T) string {
	url, _ := redisrun.Start(t)
	return url
}

// The Redis store keeps a latest and a previous record as the folder
// store does: a damaged latest gives the previous.
func TestRedisKeepsAnOlderIntactCheckpoint(t *testing.T) {
	ctx := context.Background()
	store, err := OpenRedis(ctx, startRedis(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k, fence := keepTwoCalls(t, ctx, store)
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
	if err := store.Delete(ctx, "box.1", fence); err != nil {
		t.Fatal(err)
	}
	if l, p, err := getBoth(ctx, store, "box.1"); l != nil || p != nil || err != nil {
		t.Errorf("after delete: %d %d %v", len(l), len(p), err)
	}
	if _, err := OpenRedis(ctx, "redis://127.0.0.1:1/0", 0); err == nil {
		t.Error("a store that does not answer opened")
	}
}

// The Redis store reads records within their bound, as the folder store
// does: a value larger than any record, or not a string, is refused
// unread, and the store's other sessions are listed.
func TestRedisReadsRecordsWithinTheirBound(t *testing.T) {
	ctx := context.Background()
	store, err := OpenRedis(ctx, startRedis(t), 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k, _ := keepTwoCalls(t, ctx, store) // box.1, intact
	if err := store.c.Set(ctx, redisLatest+"box.2", strings.Repeat("x", int(MaxRecord(32<<20))+1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := store.c.HSet(ctx, redisLatest+"box.3", "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"box.2": "past the", "box.3": "not a string"} {
		if _, _, err := k.Load(ctx, id); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Errorf("load %s: %v, want ErrCorrupt saying %q", id, err, want)
		}
	}
	if saved, err := k.List(ctx); err != nil || len(saved) != 1 || saved[0].ID != "box.1" {
		t.Errorf("list: %+v %v, want box.1 alone", saved, err)
	}
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Leases in a folder store: at most one holder, a new generation when the
// key changes hands, a move asked for seen by the holder on its renewal,
// and a stale holder's writes refused (fencing).
func TestLeaseDir(t *testing.T) {
	store, err := OpenDir(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	leaseContract(t, store)
}

// The same in Redis: Debian's redis-server on loopback.
func TestLeaseRedis(t *testing.T) {
	store, err := OpenRedis(context.Background(), startRedis(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	leaseContract(t, store)
}

func leaseContract(t *testing.T, store Store) {
	ctx := context.Background()
	const key = "box-1.0123456789abcdef0123456789abcdef"
	const ttl = 300 * time.Millisecond
	a, err := store.Acquire(ctx, key, "a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := store.Acquire(ctx, key, "a", ttl); err != nil || again != a {
		t.Fatalf("the holder again: %+v %v, want %+v", again, err, a)
	}
	_, err = store.Acquire(ctx, key, "b", ttl)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != "a" || !errors.Is(err, sessions.ErrHeld) {
		t.Fatalf("b took a held lease: %v", err)
	}
	if err := store.Put(ctx, key, NewRecord([]byte("a's state")), 1, a); err != nil {
		t.Fatal(err)
	}
	if move, err := store.Renew(ctx, key, a, ttl); err != nil || move {
		t.Fatalf("renew: %v %v", move, err)
	}
	if err := store.WantMove(ctx, key); err != nil {
		t.Fatal(err)
	}
	if move, err := store.Renew(ctx, key, a, ttl); err != nil || !move {
		t.Fatalf("renew after a move was asked: move %v, %v", move, err)
	}
	// a hands over: b takes the next generation.
	if err := store.Release(ctx, key, a); err != nil {
		t.Fatal(err)
	}
	b, err := store.Acquire(ctx, key, "b", ttl)
	if err != nil || b.Gen <= a.Gen {
		t.Fatalf("b after the release: %+v %v (a had %+v)", b, err, a)
	}
	if move, err := store.Renew(ctx, key, b, ttl); err != nil || move {
		t.Fatalf("b's lease carries a's move: %v %v", move, err)
	}
	if err := store.Put(ctx, key, NewRecord([]byte("b's state")), 2, b); err != nil {
		t.Fatal(err)
	}
	// a is stale: its writes, renewals and releases are refused, and b's
	// state stays.
	if err := store.Put(ctx, key, NewRecord([]byte("a's stale state")), 3, a); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a stale holder's checkpoint: %v, want ErrLeaseLost", err)
	}
	if _, err := store.Renew(ctx, key, a, ttl); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a stale holder's renewal: %v", err)
	}
	if err := store.Delete(ctx, key, a); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a stale holder's delete: %v", err)
	}
	if err := store.Release(ctx, key, a); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a stale holder's release: %v", err)
	}
	if latest, prev, err := getBoth(ctx, store, key); err != nil || string(latest) != "b's state" || string(prev) != "a's state" {
		t.Fatalf("records %q %q %v", latest, prev, err)
	}
	// b stops renewing (it died): once its lease expires, c takes the
	// key, and b's late write is refused.
	time.Sleep(ttl + 100*time.Millisecond)
	c, err := store.Acquire(ctx, key, "c", ttl)
	if err != nil || c.Gen <= b.Gen {
		t.Fatalf("c after b's lease expired: %+v %v", c, err)
	}
	if err := store.Put(ctx, key, NewRecord([]byte("b's late state")), 3, b); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("an expired holder's checkpoint: %v", err)
	}
	// Delete takes the lease with the records; a later lease starts anew.
	if err := store.Delete(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	if latest, prev, err := getBoth(ctx, store, key); latest != nil || prev != nil || err != nil {
		t.Fatalf("after delete: %q %q %v", latest, prev, err)
	}
	if _, err := store.Acquire(ctx, key, "d", ttl); err != nil {
		t.Fatalf("after delete: %v", err)
	}
}

// A lease that expired unrenewed (the store did not answer) is taken again
// by its holder only if nobody held it meanwhile: otherwise the holder's
// state is stale, and the session is reported lost to it.
func TestLeaseRetakenOnlyIfNobodyHadIt(t *testing.T) {
	store, err := OpenDir(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	const key = "box-1.0123456789abcdef0123456789abcdef"
	k := &Keeper{store: store, log: hclog.NewNullLogger(), leases: map[string]Lease{}}
	k.SetLeases("a", time.Second)
	ctx := context.Background()
	if err := k.Hold(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if moves, lost := k.Renew(ctx); len(moves)+len(lost) != 0 {
		t.Fatalf("an expired lease nobody took: moves %v lost %v, want it held again", moves, lost)
	}
	time.Sleep(1100 * time.Millisecond)
	other, err := store.Acquire(ctx, key, "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, key, other); err != nil {
		t.Fatal(err)
	}
	if _, lost := k.Renew(ctx); len(lost) != 1 {
		t.Fatalf("a lease another holder had meanwhile: lost %v, want the session", lost)
	}
}

// A lease held by a process of this instance, on this host, that is gone
// (pyrun killed and started again with the same instance id) is taken at
// once, with a new generation, rather than after it expires. Controls: a
// live process's lease (another pyrun of the same instance, or a process
// id used again by another process), another instance's, another host's,
// and a name of another form stay held.
func TestLeaseOfThisInstancesGoneProcessIsTakenAtOnce(t *testing.T) {
	dir, err := OpenDir(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := OpenRedis(context.Background(), startRedis(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for name, store := range map[string]Store{"dir": dir, "redis": rd} {
		t.Run(name, func(t *testing.T) { goneSelfContract(t, store) })
	}
}

func goneSelfContract(t *testing.T, store Store) {
	ctx := context.Background()
	self := thisProcess("box-1")
	if self.start == "" {
		t.Fatalf("this process's start time cannot be read: %+v", self)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	named := func(f func(h *holderName)) string {
		h := self
		h.nonce = "0123456789ab"
		f(&h)
		return h.String()
	}
	parent, err := procStart(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	deadPid := func(h *holderName) { h.pid, h.start = gone.Process.Pid, "1" }
	for i, tc := range []struct {
		what, holder string
		taken        bool
	}{
		{"this instance's process that is gone", named(deadPid), true},
		{"this instance's process that is gone, for an owner", named(deadPid) + "/" + ownerMark("alice"), true},
		{"this instance's process whose id another process has now", named(func(h *holderName) { h.pid, h.start = os.Getppid(), "1" }), true},
		{"another live process of this instance", named(func(h *holderName) { h.pid, h.start = os.Getppid(), parent }), false},
		{"another Keeper of this process", named(func(h *holderName) {}), false},
		{"another instance's process that is gone", named(func(h *holderName) { deadPid(h); h.instance = "box-2" }), false},
		{"a process on another host", named(func(h *holderName) { deadPid(h); h.place = "elsewhere:00000000" }), false},
		{"a name of an older pyrun", fmt.Sprintf("box-1/%d/0123456789ab", gone.Process.Pid), false},
	} {
		key := fmt.Sprintf("box-1.%032x", i)
		old, err := store.Acquire(ctx, key, tc.holder, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		k := &Keeper{store: store, log: hclog.NewNullLogger(), leases: map[string]Lease{}}
		k.SetLeases(self.String(), time.Minute)
		err = k.Hold(ctx, key, "")
		switch {
		case tc.taken && err != nil:
			t.Errorf("%s: %v, want the lease taken at once", tc.what, err)
		case tc.taken:
			l, _ := k.lease(key)
			if l.Gen <= old.Gen {
				t.Errorf("%s: taken with generation %d, want past %d", tc.what, l.Gen, old.Gen)
			}
			if err := store.Put(ctx, key, NewRecord([]byte("late")), 1, old); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("%s: its late write: %v, want ErrLeaseLost", tc.what, err)
			}
		case !errors.Is(err, sessions.ErrHeld):
			t.Errorf("%s: %v, want it held", tc.what, err)
		}
	}
}

// getBoth reads key's latest and previous records.
func getBoth(ctx context.Context, s Store, key string) (latest, previous []byte, err error) {
	read := func(prev bool) ([]byte, error) {
		r, err := s.Get(ctx, key, prev)
		if r == nil || err != nil {
			return nil, err
		}
		defer r.Close()
		b := make([]byte, r.Size())
		_, err = r.ReadAt(b, 0)
		return b, err
	}
	if latest, err = read(false); err != nil {
		return nil, nil, err
	}
	previous, err = read(true)
	return latest, previous, err
}

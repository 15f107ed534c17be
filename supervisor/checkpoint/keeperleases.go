package checkpoint

// The Keeper's side of leases (lease.go): it is the sessions' Leaser
// (sessions.Options.Leases), holding, renewing and releasing the leases of
// the sessions this instance serves in its store.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// DefaultLeaseTTL is how long a session's lease lasts unless its holder
// renews it (--session-lease): how long a session of an instance that
// died waits before another can take it over.
const DefaultLeaseTTL = 10 * time.Second

// Holder is a name for this process in leases: the instance's name, the
// host, the process id and random hex, so that a pyrun started again with
// the same instance id is not taken for the one before it, and takes the
// leases of the one before it at once once it is gone (lease.go).
func Holder(instance string) string { return thisProcess(instance).String() }

// SetLeases names this process in leases (Holder) and sets how long they
// last unless renewed. Call it before the Keeper is used.
func (k *Keeper) SetLeases(holder string, ttl time.Duration) {
	if ttl > 0 {
		k.ttl = ttl
	}
	k.holder = holder
}

// lease is the lease held of id, if any.
func (k *Keeper) lease(id string) (Lease, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.leases[id]
	return l, ok
}

// Hold implements sessions.Leaser.
func (k *Keeper) Hold(ctx context.Context, id, owner string) error {
	name := k.holderFor(id, owner)
	l, err := k.store.Acquire(ctx, id, name, k.ttl)
	if err != nil {
		l, err = k.fromGoneSelf(ctx, id, name, err)
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.leases[id] = l
	k.mu.Unlock()
	return nil
}

// AskMove implements sessions.Leaser.
func (k *Keeper) AskMove(ctx context.Context, id string) error { return k.store.WantMove(ctx, id) }

// RenewEvery implements sessions.Leaser: a lease is renewed several
// times within its time to live, and at least every second, which is how
// long a hand-over waits to be seen.
func (k *Keeper) RenewEvery() time.Duration { return min(k.ttl/4, time.Second) }

// Renew implements sessions.Leaser.
func (k *Keeper) Renew(ctx context.Context) (moves, lost []string) {
	k.mu.Lock()
	held := maps.Clone(k.leases)
	k.mu.Unlock()
	for id, l := range held {
		move, err := k.store.Renew(ctx, id, l, k.ttl)
		if errors.Is(err, ErrLeaseLost) && k.retake(ctx, id, l) {
			// It expired while the store did not answer, and nobody
			// took it meanwhile: it is held again.
			continue
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			k.mu.Lock()
			if k.leases[id] == l {
				delete(k.leases, id)
			}
			k.mu.Unlock()
			lost = append(lost, id)
		case err != nil:
			// The store does not answer: the lease lasts its time to
			// live, and the next renewal tries again.
			k.log.Warn("cannot renew a session's lease", "session_id", id, "error", err.Error())
		case move:
			moves = append(moves, id)
		}
	}
	return moves, lost
}

// retake takes id's lease again after l expired, if no other holder had it
// since: the next generation is then this one's. Else it is not kept.
func (k *Keeper) retake(ctx context.Context, id string, l Lease) bool {
	nl, err := k.store.Acquire(ctx, id, l.Holder, k.ttl)
	if err != nil {
		return false
	}
	if nl.Gen != l.Gen+1 {
		_ = k.store.Release(ctx, id, nl) // another served it since: this state is stale
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.leases[id] != l {
		return false // released meanwhile
	}
	k.leases[id] = nl
	k.log.Info("a session's lease expired unrenewed, and was taken again", "session_id", id)
	return true
}

// Release implements sessions.Leaser.
func (k *Keeper) Release(ctx context.Context, id string) error {
	k.forget(id)
	k.mu.Lock()
	l, ok := k.leases[id]
	delete(k.leases, id)
	k.mu.Unlock()
	if !ok {
		return nil
	}
	return k.store.Release(ctx, id, l)
}

// Describe implements sessions.Leaser: the description of id's latest
// record that reads, else of the one before it.
func (k *Keeper) Describe(ctx context.Context, id string) (sessions.Saved, error) {
	var bad []string // why each record there is refused
	for i, previous := range []bool{false, true} {
		rec, err := k.store.Get(ctx, id, previous)
		if err != nil {
			return sessions.Saved{}, err
		}
		if rec == nil {
			continue
		}
		m, _, err := ReadRecordMeta(rec, k.key)
		_ = rec.Close()
		if err == nil && m.Session == id {
			return savedOf(m), nil
		}
		if err == nil {
			err = fmt.Errorf("%w: it is session %s's", ErrCorrupt, m.Session)
		}
		bad = append(bad, []string{"latest", "previous"}[i]+" record: "+strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": "))
	}
	if len(bad) > 0 {
		return sessions.Saved{}, fmt.Errorf("%w (%s)", sessions.ErrDamaged, strings.Join(bad, "; "))
	}
	return sessions.Saved{}, fmt.Errorf("session %s: %w", id, sessions.ErrNoCheckpoint)
}

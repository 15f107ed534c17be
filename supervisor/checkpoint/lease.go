package checkpoint

// Leases (docs/sessions.md, "Several instances"): at most one pyrun
// instance serves a session at a time. The instance that serves it holds
// its lease in the store, renews it while it serves, and releases it when
// it stops serving it. Each lease taken anew gets the next generation of
// its key, and a checkpoint is written or deleted only by the holder of the
// generation in force (fencing): an instance that lost its lease, however
// late its write comes, never overwrites the state a newer holder keeps.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// Lease is one holder's hold on a key, as Acquire gave it.
type Lease struct {
	Holder string
	Gen    int64
}

// ErrLeaseLost: the lease given is not the one in force (it expired, or
// another holder took the key since).
var ErrLeaseLost = errors.New("this instance no longer holds the session's lease")

// HeldError says who holds a key's lease. It wraps sessions.ErrHeld.
type HeldError struct {
	Key, Holder string
	// Expires is when the lease ends unless its holder renews it.
	Expires time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("session %s is served by pyrun %s (its lease ends in %s unless renewed)", e.Key, e.Holder,
		time.Until(e.Expires).Round(time.Millisecond))
}

func (e *HeldError) Unwrap() error { return sessions.ErrHeld }

// leaseRecord is a dir: store's KEY.lease file. A released or expired
// lease stays, for its generation.
type leaseRecord struct {
	Holder  string `json:"holder,omitempty"`
	Gen     int64  `json:"gen"`
	Expires int64  `json:"expires_ms"` // Unix milliseconds
	Move    bool   `json:"move,omitempty"`
}

const leaseExt = ".lease"

// lockLeases runs f holding the folder's lease lock (flock on .leases.lock),
// which other processes with the same folder take too.
func (d *Dir) lockLeases(f func() error) error {
	// Not through a link, nor blocked by a named pipe put in its place.
	lf, err := os.OpenFile(filepath.Join(d.path, ".leases.lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return fmt.Errorf("session lease: %w", err)
	}
	defer lf.Close()
	if st, err := lf.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("session lease: %s is not a regular file", lf.Name())
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("session lease: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	return f()
}

// readLease reads key's lease record; the zero record when there is none
// or it cannot be read (a crash mid-write; not a regular file): nobody
// holds it then.
func (d *Dir) readLease(key string) leaseRecord {
	var r leaseRecord
	b, err := readRegular(filepath.Join(d.path, key+leaseExt), maxSmallFile)
	if err == nil {
		_ = json.Unmarshal(b, &r)
	}
	return r
}

// writeLease replaces key's lease record (under the lease lock).
func (d *Dir) writeLease(key string, r leaseRecord) error {
	b, _ := json.Marshal(r)
	tmp := filepath.Join(d.path, ".tmp-lease-"+key)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("session lease: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.path, key+leaseExt)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("session lease: %w", err)
	}
	return nil
}

func (r leaseRecord) live(now time.Time) bool {
	return r.Holder != "" && now.UnixMilli() < r.Expires
}

// holds says whether l is the lease in force of r.
func (r leaseRecord) holds(l Lease, now time.Time) bool {
	return r.live(now) && r.Holder == l.Holder && r.Gen == l.Gen
}

func (d *Dir) Acquire(_ context.Context, key, holder string, ttl time.Duration) (Lease, error) {
	if err := checkKey(key); err != nil {
		return Lease{}, err
	}
	var l Lease
	err := d.lockLeases(func() error {
		now := time.Now()
		r := d.readLease(key)
		switch {
		case r.live(now) && r.Holder != holder:
			return &HeldError{Key: key, Holder: r.Holder, Expires: time.UnixMilli(r.Expires)}
		case !r.live(now):
			r = leaseRecord{Holder: holder, Gen: r.Gen + 1}
		}
		r.Expires = now.Add(ttl).UnixMilli()
		l = Lease{Holder: holder, Gen: r.Gen}
		return d.writeLease(key, r)
	})
	return l, err
}

func (d *Dir) Renew(_ context.Context, key string, l Lease, ttl time.Duration) (move bool, err error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	err = d.lockLeases(func() error {
		now := time.Now()
		r := d.readLease(key)
		if !r.holds(l, now) {
			return ErrLeaseLost
		}
		r.Expires = now.Add(ttl).UnixMilli()
		move = r.Move
		return d.writeLease(key, r)
	})
	return move, err
}

func (d *Dir) Release(_ context.Context, key string, l Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return d.lockLeases(func() error {
		r := d.readLease(key)
		if !r.holds(l, time.Now()) {
			return ErrLeaseLost
		}
		return d.writeLease(key, leaseRecord{Gen: r.Gen})
	})
}

func (d *Dir) WantMove(_ context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return d.lockLeases(func() error {
		r := d.readLease(key)
		if !r.live(time.Now()) || r.Move {
			return nil
		}
		r.Move = true
		return d.writeLease(key, r)
	})
}

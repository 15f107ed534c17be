package checkpoint

// Leases (docs/sessions.md, "Several instances"): at most one pyrun
// instance serves a session at a time. The instance that serves it holds
// its lease in the store, renews it while it serves, and releases it when
// it stops serving it. Each lease taken anew gets the next generation of
// its key, and a checkpoint is written or deleted only by the holder of the
// generation in force (fencing): an instance that lost its lease, however
// late its write comes, never overwrites the state a newer holder keeps.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/redis/go-redis/v9"

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
	who, _ := cutOwnerMark(e.Holder)
	return fmt.Sprintf("session %s is served by pyrun %s (its lease ends in %s unless renewed)", e.Key, who,
		time.Until(e.Expires).Round(time.Millisecond))
}

// ServesFor says whether the holder serves the session for client, as the
// owner mark in its name says (Keeper.Hold); known is false for a name
// without one.
func (e *HeldError) ServesFor(client string) (yes, known bool) {
	_, mark := cutOwnerMark(e.Holder)
	if mark == "" {
		return false, false
	}
	return mark == ownerMark(client), true
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

// lockLeases runs f holding the folder's lease lock (a file lock on
// .leases.lock: flock(2) on Unix, LockFileEx on Windows, through
// gofrs/flock as the runtime's install lock), which other processes with
// the same folder take too.
func (d *Dir) lockLeases(f func() error) error {
	// Not through a link, nor blocked by a named pipe put in its place.
	path := filepath.Join(d.path, ".leases.lock")
	l := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR|noFollow|nonBlock), flock.SetPermissions(0o600))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("session lease: %w", err)
	}
	defer l.Close()
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("session lease: %s is not a regular file", path)
	}
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
	return d.acquire(key, holder, "", ttl)
}

// acquire is Acquire, which takes the lease from dead too, as if it had
// been released ("": from nobody).
func (d *Dir) acquire(key, holder, dead string, ttl time.Duration) (Lease, error) {
	if err := checkKey(key); err != nil {
		return Lease{}, err
	}
	var l Lease
	err := d.lockLeases(func() error {
		now := time.Now()
		r := d.readLease(key)
		if dead != "" && r.Holder == dead {
			r = leaseRecord{Gen: r.Gen}
		}
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

// A pyrun killed and started again with the same instance id (and store)
// finds its sessions' leases held by the process before it, which cannot
// release them any more: rather than wait for them to expire
// (--session-lease), it takes them at once when the holder's name shows a
// process of this instance, on this host, that is gone. The name says
// where the process ran (the host's name, and a mark of the kernel's boot
// and the process id namespace, so that a process id is never looked up
// where it means another process) and which process it was (its id and
// its start time, so that a process id used again is not taken for it).

// holderName is what a lease holder's name says: Holder makes one, in the
// form INSTANCE/HOST:MARK/PID:START/NONCE.
type holderName struct {
	instance, place string
	pid             int
	start, nonce    string // start: "" where it cannot be read
}

func (h holderName) String() string {
	return fmt.Sprintf("%s/%s/%d:%s/%s", h.instance, h.place, h.pid, h.start, h.nonce)
}

// thisProcess names this process, of instance, in leases.
func thisProcess(instance string) holderName {
	var b [6]byte
	_, _ = rand.Read(b[:])
	h := holderName{instance: instance, place: thisPlace(), pid: os.Getpid(), nonce: hex.EncodeToString(b[:])}
	h.start, _ = procStart(h.pid)
	return h
}

// thisPlace is the host's name, and a mark of its kernel's boot and of
// this process's pid namespace: two places differ when a process id of one
// may mean nothing, or another process, in the other.
func thisPlace() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(boot)) + "\x00" + ns))
	return strings.NewReplacer("/", "_", ":", "_").Replace(host) + ":" + hex.EncodeToString(sum[:4])
}

// parseHolder reads a name thisProcess made, with or without an owner
// mark; false for any other (an older pyrun's, or a test's).
func parseHolder(s string) (holderName, bool) {
	s, _ = cutOwnerMark(s)
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return holderName{}, false
	}
	p, start, ok := strings.Cut(parts[2], ":")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 || !strings.Contains(parts[1], ":") {
		return holderName{}, false
	}
	return holderName{instance: parts[0], place: parts[1], pid: pid, start: start, nonce: parts[3]}, true
}

// procStart is process pid's start time (clock ticks after boot, the 22nd
// field of /proc/PID/stat); an error when there is no such process, it
// has exited (a zombie yet to be reaped), or there is no /proc.
func procStart(pid int) (start string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command's name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return "", fmt.Errorf("process %d has exited", pid)
	}
	return f[19], nil
}

// goneSelf says whether holder names a process of self's instance, on
// self's host, that is not running any more (and is not self).
func goneSelf(holder string, self holderName) bool {
	h, ok := parseHolder(holder)
	switch {
	case !ok, h.instance != self.instance, h.place != self.place, h.start == "", self.start == "":
		return false
	case h.pid == self.pid && h.start == self.start:
		return false // this very process (another Keeper of it)
	}
	start, err := procStart(h.pid)
	return err != nil || start != h.start
}

// seizer is a Store that can take a lease from a holder known to be gone.
type seizer interface {
	// Seize is Acquire, which also takes key's lease from dead.
	Seize(ctx context.Context, key, holder, dead string, ttl time.Duration) (Lease, error)
}

func (d *Dir) Seize(_ context.Context, key, holder, dead string, ttl time.Duration) (Lease, error) {
	return d.acquire(key, holder, dead, ttl)
}

// KEYS: lease, generation counter. ARGV: holder, ttl ms, dead holder. The
// acquire script, with the lease of the dead holder dropped first.
var seizeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') == ARGV[3] then
  redis.call('DEL', KEYS[1])
end` + acquireLua)

func (r *Redis) Seize(ctx context.Context, key, holder, dead string, ttl time.Duration) (Lease, error) {
	if err := checkKey(key); err != nil {
		return Lease{}, err
	}
	v, err := seizeScript.Run(ctx, r.c, []string{redisLease + key, redisGen + key}, holder, ttl.Milliseconds(), dead).Slice()
	return leaseAnswer(key, v, err)
}

// fromGoneSelf takes id's lease, which Acquire found held (err), when its
// holder is a process of this instance on this host that is gone; else it
// returns err.
func (k *Keeper) fromGoneSelf(ctx context.Context, id, name string, err error) (Lease, error) {
	var held *HeldError
	s, ok := k.store.(seizer)
	self, parsed := parseHolder(k.holder)
	if !errors.As(err, &held) || !ok || !parsed || !goneSelf(held.Holder, self) {
		return Lease{}, err
	}
	l, serr := s.Seize(ctx, id, name, held.Holder, k.ttl)
	if serr != nil {
		return Lease{}, serr
	}
	k.log.Info("took a python session's lease from this instance's previous process, which is gone", "python_session", id,
		"holder", held.Holder)
	return l, nil
}

// A session's lease is taken for its owner when the session starts
// (sessions.Leaser's Hold): the holder's name then ends with a mark of the
// owner, so that a call for the session on another instance, before the
// session has a record that says whose it is, can refuse another client's
// call without asking for a hand-over (which would move the session off
// its live worker).

// ownerMarkPrefix starts the last part of a holder's name that marks the
// owner its lease was taken for.
const ownerMarkPrefix = "o-"

// ownerMark is the mark of owner in a holder's name: a hash, for a
// client's name is no business of the store's.
func ownerMark(owner string) string {
	sum := sha256.Sum256([]byte("pyrun session owner\x00" + owner))
	return ownerMarkPrefix + hex.EncodeToString(sum[:8])
}

// cutOwnerMark splits a holder's name into the process's name and its
// owner mark ("" when it has none).
func cutOwnerMark(holder string) (name, mark string) {
	i := strings.LastIndexByte(holder, '/')
	if i < 0 || !strings.HasPrefix(holder[i+1:], ownerMarkPrefix) {
		return holder, ""
	}
	return holder[:i], holder[i+1:]
}

// holderFor is the name to take id's lease with: that of the lease held
// already, which is renewed; else this process's, with owner's mark
// unless owner is "" (unknown, as to a call that takes a session over
// before it has read its record).
func (k *Keeper) holderFor(id, owner string) string {
	if l, ok := k.lease(id); ok {
		return l.Holder
	}
	if owner == "" {
		return k.holder
	}
	return k.holder + "/" + ownerMark(owner)
}

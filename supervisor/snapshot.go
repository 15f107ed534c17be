package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Memory snapshots. A worker that starts plainly spends about two seconds
// (three of CPU) starting Python; one that starts from a memory snapshot of
// a worker that already did is ready in about a quarter of that. A snapshot
// is made once per runtime, by a Deno process
// that writes it to its stdout (no Deno process ever gets write permission),
// and kept in the runtime root's snapshots folder next to a small JSON file
// that says what it was made from and its checksum:
//
//	~/.cache/pyrun/snapshots/<key>.snap   the bytes, read-only
//	~/.cache/pyrun/snapshots/<key>.json   snapshotMeta
//
// The key covers everything the snapshot's contents depend on: pyrun's
// worker program (which includes pyrun_helper.py and the pinned Deno and
// Pyodide versions, see hostHash). Packages preloaded by Config.Deps are
// not in it: a worker loads them after it is restored. The heap limit
// is not part of it: the cap is a JavaScript wrapper each worker installs
// itself, outside the snapshot. A snapshot whose key, size or checksum does
// not match is never used: it is made again, and a worker that still cannot
// use its snapshot starts plainly and says why. A pool checks the checksum
// once, while its first worker's process boots (snapshots.get).

// Snapshot is a memory snapshot on disk. EnsureSnapshot returns one whose
// checksum it has checked or that it has just made.
type Snapshot struct {
	Path   string // the snapshot's bytes
	Key    string // what it was made from (snapshotKey)
	SHA256 string // of the bytes, hex
	Size   int64  // in bytes
	Made   time.Time
	// Built says whether this call made it (else it was there and valid),
	// and BuildTime how long making it took.
	Built     bool
	BuildTime time.Duration

	checked os.FileInfo // the file as found: another file at Path means another check
}

// snapshotFormat names how pyrun makes and describes snapshots; changing it
// retires every snapshot made before.
const snapshotFormat = "pyrun-snapshot/1"

// snapshotKey names the snapshot of rt: equal keys, equal contents. A
// snapshot holds the runtime alone: limits, network, isolation and the
// packages of Config.Deps are applied per process, after it is restored.
func snapshotKey(rt *Runtime) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nruntime %s\npyodide %s\n", snapshotFormat, rt.Hash, rt.Pyodide)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// snapshotMeta is the JSON file next to a snapshot.
type snapshotMeta struct {
	Format  string    `json:"format"`
	Key     string    `json:"key"`
	Runtime string    `json:"runtime"` // Runtime.Hash
	Pyodide string    `json:"pyodide"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	Made    time.Time `json:"made"`
	MakeMS  int64     `json:"make_ms"`
}

// errNoSnapshot means no snapshot of the key has been made yet.
var errNoSnapshot = errors.New("no snapshot yet")

// maxSnapshot bounds what pyrun accepts from the maker: the wasm heap tops
// out at 4 GiB, plus Pyodide's header.
const maxSnapshot = 4<<30 + 16<<20

func snapshotPaths(rt *Runtime, key string) (snap, meta string) {
	base := filepath.Join(rt.SnapshotDir, key)
	return base + ".snap", base + ".json"
}

// openSnapshot finds the snapshot of rt and checks it: its description
// must name the key, and its bytes their size and checksum.
func openSnapshot(rt *Runtime) (*Snapshot, error) {
	snap, err := findSnapshot(rt)
	if err != nil {
		return nil, err
	}
	if err := snap.verify(); err != nil {
		return nil, err
	}
	return snap, nil
}

// findSnapshot finds the snapshot of rt and checks what is cheap to
// check: its description names the key and the runtime, and the file has
// the size the description gives. verify checks the bytes.
func findSnapshot(rt *Runtime) (*Snapshot, error) {
	key := snapshotKey(rt)
	snapPath, metaPath := snapshotPaths(rt, key)
	b, err := os.ReadFile(metaPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoSnapshot
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot description: %w", err)
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("snapshot description %s: %w", metaPath, err)
	}
	if m.Format != snapshotFormat || m.Key != key || m.Runtime != rt.Hash {
		return nil, fmt.Errorf("snapshot %s was made for something else (format %q, key %s, runtime %s)", snapPath, m.Format, m.Key, m.Runtime)
	}
	st, err := os.Stat(snapPath)
	if err != nil {
		return nil, fmt.Errorf("open snapshot: %w", err)
	}
	if st.Size() != m.Size {
		return nil, fmt.Errorf("snapshot %s has %d bytes, its description says %d", snapPath, st.Size(), m.Size)
	}
	// Mark it in use, for pruneSnapshots; a failure only makes it look stale.
	now := time.Now()
	_ = os.Chtimes(metaPath, now, now)
	return &Snapshot{Path: snapPath, Key: key, SHA256: m.SHA256, Size: m.Size, Made: m.Made, checked: st}, nil
}

// verify checks that the file is still the one found and that its bytes
// have the checksum its description gives (~35 ms for 31 MB).
func (s *Snapshot) verify() error {
	f, err := os.Open(s.Path)
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	if !os.SameFile(st, s.checked) || st.Size() != s.Size {
		return fmt.Errorf("snapshot %s changed while in use", s.Path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != s.SHA256 {
		return fmt.Errorf("snapshot %s is corrupt: its checksum is %s, its description says %s", s.Path, sum, s.SHA256)
	}
	return nil
}

// unchanged reports whether the file is still the one found. pyrun replaces
// snapshots only by renaming a new file into place, so a change of file,
// size or time means another check.
func (s *Snapshot) unchanged() bool {
	st, err := os.Stat(s.Path)
	return err == nil && os.SameFile(st, s.checked) && st.Size() == s.checked.Size() &&
		st.ModTime().Equal(s.checked.ModTime())
}

// EnsureSnapshot returns the memory snapshot workers of cfg start from,
// making it first when there is none or the one there cannot be trusted
// (made for something else, truncated, corrupt). Concurrent calls, also
// from other processes, make it once. `pyrun warmup` calls it; pools call
// it on their own when their first worker starts.
func EnsureSnapshot(ctx context.Context, rt *Runtime, cfg Config, log hclog.Logger) (*Snapshot, error) {
	cfg = cfg.withDefaults()
	if snap, err := openSnapshot(rt); err == nil {
		return snap, nil
	}
	if err := os.MkdirAll(rt.SnapshotDir, 0o755); err != nil {
		return nil, fmt.Errorf("create snapshot folder: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(rt.SnapshotDir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer unlock()
	// Another process may have made it while we waited.
	snap, err := openSnapshot(rt)
	if err == nil {
		return snap, nil
	}
	if !errors.Is(err, errNoSnapshot) {
		log.Warn("not using the memory snapshot there; making a new one", "why", err)
	}
	snap, err = buildSnapshot(ctx, rt, cfg, log)
	if err != nil {
		return nil, err
	}
	pruneSnapshots(rt, snap.Key, log)
	return snap, nil
}

// buildSnapshot runs the maker and installs what it writes. The lock is held.
func buildSnapshot(ctx context.Context, rt *Runtime, cfg Config, log hclog.Logger) (*Snapshot, error) {
	began := time.Now()
	key := snapshotKey(rt)
	snapPath, metaPath := snapshotPaths(rt, key)
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, rt.Deno) // killed when ctx ends
	if err := workerCmd(cmd, rt, Python, cfg, launch{makeSnapshot: true}); err != nil {
		return nil, fmt.Errorf("make snapshot: %w", err)
	}
	log.Info("making a memory snapshot for fast worker starts (3-10 s); this happens once per pyrun version, and the first calls wait for it", "path", snapPath)
	tmp, err := os.CreateTemp(rt.SnapshotDir, key+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("make snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	defer tmp.Close()

	setProcAttr(cmd)
	cmd.WaitDelay = stopTermDelay
	h := sha256.New()
	out := &cappedWriter{w: io.MultiWriter(tmp, h), left: maxSnapshot}
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stdout = out
	cmd.Stderr = &lineWriter{fn: func(line string) {
		stderr.add(line)
		log.Debug(line, "from", "snapshot maker")
	}}
	if err := cmd.Run(); err != nil {
		why := err.Error()
		if ctx.Err() != nil {
			why = fmt.Sprintf("not done after %s", cfg.StartTimeout)
		}
		if t := stderr.String(); t != "" {
			why += "; its last words on stderr:\n" + t
		}
		return nil, fmt.Errorf("make snapshot: %s", why)
	}
	if out.err != nil {
		return nil, fmt.Errorf("make snapshot: %w", out.err)
	}
	if out.n == 0 {
		return nil, errors.New("make snapshot: the maker wrote nothing")
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("make snapshot: %w", err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return nil, fmt.Errorf("make snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("make snapshot: %w", err)
	}
	took := time.Since(began)
	m := snapshotMeta{
		Format: snapshotFormat, Key: key, Runtime: rt.Hash, Pyodide: rt.Pyodide,
		SHA256: hex.EncodeToString(h.Sum(nil)), Size: out.n, Made: time.Now().UTC().Truncate(time.Second),
		MakeMS: took.Milliseconds(),
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	// The bytes first, then the description that vouches for them: a crash
	// between the two leaves a description that does not match, and a new
	// snapshot is made.
	if err := os.Rename(tmp.Name(), snapPath); err != nil {
		return nil, fmt.Errorf("install snapshot: %w", err)
	}
	if err := writeFileAtomic(metaPath, append(mb, '\n')); err != nil {
		return nil, fmt.Errorf("install snapshot: %w", err)
	}
	st, err := os.Stat(snapPath)
	if err != nil {
		return nil, fmt.Errorf("install snapshot: %w", err)
	}
	log.Info("memory snapshot made", "path", snapPath, "size_mib", out.n>>20, "took", took.Round(time.Millisecond))
	return &Snapshot{
		Path: snapPath, Key: key, SHA256: m.SHA256, Size: m.Size, Made: m.Made,
		Built: true, BuildTime: took, checked: st,
	}, nil
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// pruneSnapshots removes snapshots no pyrun has used for staleAfter, those
// of runtimes that are gone, and leftovers of makers that died. The lock is
// held.
func pruneSnapshots(rt *Runtime, keep string, log hclog.Logger) {
	entries, err := os.ReadDir(rt.SnapshotDir)
	if err != nil {
		return
	}
	root := filepath.Dir(rt.Dir)
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(rt.SnapshotDir, name)
		info, err := e.Info()
		if err != nil || name == ".lock" || strings.HasPrefix(name, keep+".") && !strings.Contains(name, ".tmp-") {
			continue
		}
		var stale bool
		switch {
		case strings.Contains(name, ".tmp-"):
			stale = time.Since(info.ModTime()) > time.Hour
		case strings.HasSuffix(name, ".json"):
			var m snapshotMeta
			b, _ := os.ReadFile(p)
			_ = json.Unmarshal(b, &m)
			_, gone := os.Stat(filepath.Join(root, "host-"+m.Runtime))
			stale = m.Runtime == "" || gone != nil || time.Since(info.ModTime()) > staleAfter
		case strings.HasSuffix(name, ".snap"):
			// Goes with its description; alone, it is of no use.
			_, err := os.Stat(strings.TrimSuffix(p, ".snap") + ".json")
			stale = err != nil
		}
		if !stale {
			continue
		}
		if strings.HasSuffix(name, ".json") {
			_ = os.Remove(strings.TrimSuffix(p, ".json") + ".snap")
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("could not remove an old snapshot", "path", p, "error", err)
		}
	}
}

// cappedWriter passes at most left bytes on, then fails.
type cappedWriter struct {
	w    io.Writer
	left int64
	n    int64
	err  error
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.err = fmt.Errorf("the maker wrote more than %d bytes", maxSnapshot)
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// lineWriter calls fn for every line written to it.
type lineWriter struct {
	fn      func(line string)
	partial []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.partial = append(lw.partial, p...)
	for {
		i := bytes.IndexByte(lw.partial, '\n')
		if i < 0 {
			break
		}
		if line := string(lw.partial[:i]); line != "" {
			lw.fn(line)
		}
		lw.partial = lw.partial[i+1:]
	}
	if len(lw.partial) > 64<<10 { // a line that never ends
		lw.fn(string(lw.partial))
		lw.partial = lw.partial[:0]
	}
	return len(p), nil
}

// snapshots hands a pool's worker starts their snapshot. It checks or makes
// each key's snapshot once for all concurrent starts, and stops using one
// that workers keep failing to start from. Safe for concurrent use.
type snapshots struct {
	rt  *Runtime
	log hclog.Logger

	mu      sync.Mutex
	entries map[string]*snapEntry
}

// snapEntry is what a pool knows of one key's snapshot. Its fields other
// than ready are guarded by snapshots.mu.
type snapEntry struct {
	ready chan struct{} // closed once snap, verify and at are set
	snap  *Snapshot     // nil: no usable snapshot, start plainly
	// verify checks snap's bytes, once for all the starts that call it;
	// nil when they are known good (checked or made just now).
	verify   func() error
	at       time.Time // when snap was set
	recheck  bool      // a start from snap failed: check the file again
	failures int       // starts from this key's snapshot that failed, in a row
}

// Snapshot starts that fail this many times in a row make the pool stop
// using the key's snapshot; a failed make is retried after snapshotRetry.
const (
	maxSnapshotFailures = 2
	snapshotRetry       = 10 * time.Minute
)

func newSnapshots(rt *Runtime, log hclog.Logger) *snapshots {
	return &snapshots{rt: rt, log: log, entries: map[string]*snapEntry{}}
}

// stale says whether e must be checked or made again. s.mu is held.
func (e *snapEntry) stale() bool {
	select {
	case <-e.ready:
	default:
		return false // being checked or made right now
	}
	switch {
	case e.failures >= maxSnapshotFailures:
		return false // given up on
	case e.snap == nil:
		return time.Since(e.at) > snapshotRetry
	default:
		return e.recheck || !e.snap.unchanged()
	}
}

// get returns the snapshot for a worker of cfg to start from, or nil for a
// plain start. It waits while the snapshot is checked or made. The first
// time a process uses a snapshot, only the cheap checks are made here and
// verify, when not nil, checks the bytes: a start calls it while its Deno
// process boots, which hides the checksum's time, and must not use the
// worker if it fails.
func (s *snapshots) get(ctx context.Context, cfg Config) (snap *Snapshot, verify func() error) {
	key := snapshotKey(s.rt)
	s.mu.Lock()
	e := s.entries[key]
	if e == nil || e.stale() {
		next := &snapEntry{ready: make(chan struct{})}
		first := e == nil
		if e != nil {
			next.failures = e.failures
		}
		e = next
		s.entries[key] = e
		s.mu.Unlock()
		var snap *Snapshot
		var verify func() error
		if first {
			if found, err := findSnapshot(s.rt); err == nil {
				snap, verify = found, sync.OnceValue(found.verify)
			}
		}
		if snap == nil {
			var err error
			snap, err = EnsureSnapshot(ctx, s.rt, cfg, s.log)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("workers start without a memory snapshot, which makes starts slower",
					"error", err, "retry_in", snapshotRetry)
			}
		}
		s.mu.Lock()
		e.snap, e.verify, e.at = snap, verify, time.Now()
		close(e.ready)
	} else {
		s.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, nil
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if e.failures >= maxSnapshotFailures || e.snap == nil {
		return nil, nil
	}
	return e.snap, e.verify
}

// started tells how a start from snap went: a worker that is ready from
// it, or one that failed to start (err) or had to start without it (why).
func (s *snapshots) started(snap *Snapshot, err error, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[snap.Key]
	if e == nil || e.snap != snap {
		return // news of a snapshot checked again since
	}
	if err == nil && why == "" {
		e.failures = 0
		return
	}
	e.failures++
	if why == "" {
		why = err.Error()
	}
	if e.failures >= maxSnapshotFailures {
		s.log.Warn("workers no longer start from the memory snapshot: starts from it keep failing",
			"snapshot", snap.Path, "why", why)
		return
	}
	s.log.Warn("a worker could not start from the memory snapshot; checking it again",
		"snapshot", snap.Path, "why", why)
	e.recheck = true
}

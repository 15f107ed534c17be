// Package outputs holds the files calls wrote under /output/ for a while,
// so that the client that ran a call can read them with resources/read.
// The files stay on disk, in a folder of the store's, never in memory.
// The store is bounded in bytes and in files: when a new file does not fit,
// the oldest are dropped (deleted) first. Every file expires after the TTL.
// A read of a file that was dropped or expired says so; a read by another
// client is answered like a read of an unknown URI.
//
//	st := outputs.New(outputs.Config{TTL: 15 * time.Minute, MaxBytes: 64 << 20, MaxFiles: 256, Dir: dir})
//	st.Put("alice", "pyrun://output/TOKEN/plot.png", "image/png", spooled)
//	mime, f, size, err := st.Get("alice", "pyrun://output/TOKEN/plot.png")
package outputs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Config bounds a Store. The zero value of a field means its default.
type Config struct {
	TTL      time.Duration // how long a file stays readable; 0: 15m
	MaxBytes int64         // bytes held at most; 0: 64 MiB
	MaxFiles int           // files held at most; 0: 256
	// Dir is the folder the files are kept in, which the store's owner
	// made for it and removes when done; "": os.TempDir(), each file under
	// a name of its own. Read at New only.
	Dir string
}

// Source is a file's bytes on disk that the store may take
// (supervisor.Spooled is one).
type Source interface {
	Size() int64
	// MoveTo moves the bytes to the file dst, which then belongs to the store.
	MoveTo(dst string) error
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 15 * time.Minute
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 64 << 20
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = 256
	}
	return c
}

// Errors a read can end with.
var (
	ErrNotFound = errors.New("no such output")
	ErrExpired  = errors.New("the output expired")
	ErrDropped  = errors.New("the output was dropped to make room for newer ones")
)

// Store is safe for concurrent use.
type Store struct {
	now func() time.Time // time.Now; tests replace it

	dir string // where the files are; fixed at New

	mu    sync.Mutex
	cfg   Config
	queue []*entry // oldest first; expiry follows insertion, the TTL being one
	byURI map[string]*entry
	bytes int64
	gone  map[string]error // URIs dropped or expired, for a clear error
	order []string         // gone's keys, oldest first, so it stays bounded
}

type entry struct {
	uri, owner, mime string
	file             string // the path of its bytes
	size             int64
	expires          time.Time
}

// New makes an empty store.
func New(cfg Config) *Store {
	dir := cfg.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	return &Store{now: time.Now, dir: dir, cfg: cfg.withDefaults(), byURI: map[string]*entry{}, gone: map[string]error{}}
}

// SetConfig applies new bounds; files over them are dropped at the next Put.
func (s *Store) SetConfig(cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg.withDefaults()
}

// TTL is how long a file put now stays readable.
func (s *Store) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.TTL
}

// Token is a fresh random name for one call's outputs: 128 bits, so that
// a URI cannot be guessed.
func Token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Put keeps src's bytes under uri for owner, moving them into the store's
// folder and dropping the oldest files while they do not fit. It reports
// false, and leaves src where it is, when the file is larger than the
// whole store or could not be moved; the caller then removes it.
func (s *Store) Put(owner, uri, mime string, src Source) bool {
	size := src.Size()
	s.mu.Lock()
	too := size > s.cfg.MaxBytes
	if too {
		s.forgetLocked(uri, ErrDropped)
	}
	s.mu.Unlock()
	if too {
		return false
	}
	// Moved before it is counted: a rename, or a copy when the folder is on
	// another file system, need not hold up the store's other users.
	file := filepath.Join(s.dir, "pyrun-output-"+Token())
	if err := src.MoveTo(file); err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	if old, ok := s.byURI[uri]; ok {
		s.removeLocked(old, nil)
	}
	for len(s.queue) > 0 && (s.bytes+size > s.cfg.MaxBytes || len(s.queue)+1 > s.cfg.MaxFiles) {
		s.removeLocked(s.queue[0], ErrDropped)
	}
	e := &entry{uri: uri, owner: owner, mime: mime, file: file, size: size, expires: now.Add(s.cfg.TTL)}
	s.queue = append(s.queue, e)
	s.byURI[uri] = e
	s.bytes += size
	delete(s.gone, uri)
	return true
}

// Get opens the file at uri if owner put it and it is still held; the
// caller reads it and closes it. An open file stays readable even if the
// store drops it meanwhile.
func (s *Store) Get(owner, uri string) (mime string, f *os.File, size int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
	e, ok := s.byURI[uri]
	if ok && e.owner == owner {
		f, err := os.Open(e.file)
		if err != nil {
			return "", nil, 0, fmt.Errorf("%s: %w", uri, err)
		}
		return e.mime, f, e.size, nil
	}
	if ok {
		return "", nil, 0, fmt.Errorf("%s: %w", uri, ErrNotFound)
	}
	if why := s.gone[uri]; why != nil {
		return "", nil, 0, fmt.Errorf("%s: %w", uri, why)
	}
	return "", nil, 0, fmt.Errorf("%s: %w", uri, ErrNotFound)
}

// Clear drops every file, as pyrun stops.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		s.removeLocked(s.queue[0], nil)
	}
}

// Len reports the files and bytes held.
func (s *Store) Len() (files int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.bytes
}

func (s *Store) expireLocked(now time.Time) {
	for len(s.queue) > 0 && !now.Before(s.queue[0].expires) {
		s.removeLocked(s.queue[0], ErrExpired)
	}
}

// removeLocked takes e out of the store; why, when not nil, is what a
// later read of its URI is told.
func (s *Store) removeLocked(e *entry, why error) {
	for i, q := range s.queue {
		if q == e {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	delete(s.byURI, e.uri)
	_ = os.Remove(e.file)
	s.bytes -= e.size
	if why != nil {
		s.forgetLocked(e.uri, why)
	}
}

// maxGone bounds the URIs remembered as dropped or expired, per file held.
const maxGone = 8

func (s *Store) forgetLocked(uri string, why error) {
	if _, ok := s.gone[uri]; !ok {
		s.order = append(s.order, uri)
	}
	s.gone[uri] = why
	for len(s.order) > maxGone*s.cfg.MaxFiles {
		delete(s.gone, s.order[0])
		s.order = s.order[1:]
	}
}

// Package outputs holds the files calls wrote under /output/ for a while,
// so that the client that ran a call can read them with resources/read.
// The store is bounded in bytes and in files: when a new file does not fit,
// the oldest are dropped first. Every file expires after the TTL. A read of
// a file that was dropped or expired says so; a read by another client is
// answered like a read of an unknown URI.
//
//	st := outputs.New(outputs.Config{TTL: 15 * time.Minute, MaxBytes: 64 << 20, MaxFiles: 256})
//	st.Put("alice", "pyrun://output/TOKEN/plot.png", "image/png", data)
//	mime, data, err := st.Get("alice", "pyrun://output/TOKEN/plot.png")
package outputs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Config bounds a Store. The zero value of a field means its default.
type Config struct {
	TTL      time.Duration // how long a file stays readable; 0: 15m
	MaxBytes int64         // bytes held at most; 0: 64 MiB
	MaxFiles int           // files held at most; 0: 256
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
	data             []byte
	expires          time.Time
}

// New makes an empty store.
func New(cfg Config) *Store {
	return &Store{now: time.Now, cfg: cfg.withDefaults(), byURI: map[string]*entry{}, gone: map[string]error{}}
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

// Put keeps data under uri for owner, dropping the oldest files while it
// does not fit. It reports false when the file is larger than the whole
// store and is not kept.
func (s *Store) Put(owner, uri, mime string, data []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	if int64(len(data)) > s.cfg.MaxBytes {
		s.forgetLocked(uri, ErrDropped)
		return false
	}
	if old, ok := s.byURI[uri]; ok {
		s.removeLocked(old, nil)
	}
	for len(s.queue) > 0 && (s.bytes+int64(len(data)) > s.cfg.MaxBytes || len(s.queue)+1 > s.cfg.MaxFiles) {
		s.removeLocked(s.queue[0], ErrDropped)
	}
	e := &entry{uri: uri, owner: owner, mime: mime, data: data, expires: now.Add(s.cfg.TTL)}
	s.queue = append(s.queue, e)
	s.byURI[uri] = e
	s.bytes += int64(len(data))
	delete(s.gone, uri)
	return true
}

// Get returns the file at uri if owner put it and it is still held.
func (s *Store) Get(owner, uri string) (mime string, data []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
	e, ok := s.byURI[uri]
	if ok && e.owner == owner {
		return e.mime, e.data, nil
	}
	if ok {
		return "", nil, fmt.Errorf("%s: %w", uri, ErrNotFound)
	}
	if why := s.gone[uri]; why != nil {
		return "", nil, fmt.Errorf("%s: %w", uri, why)
	}
	return "", nil, fmt.Errorf("%s: %w", uri, ErrNotFound)
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
	s.bytes -= int64(len(e.data))
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

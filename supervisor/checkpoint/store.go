package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Store holds checkpoint records by key (a session id): the latest and the
// one before it, so that a damaged latest record still leaves an intact
// older one.
type Store interface {
	// Put makes data the latest record of key; the latest becomes the
	// previous. A failure or crash leaves the records as they were, or
	// with data as the latest: never a partial record.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns key's latest and previous records; a missing one is nil.
	Get(ctx context.Context, key string) (latest, previous []byte, err error)
	// Delete removes key's records.
	Delete(ctx context.Context, key string) error
	// Keys lists the keys with records.
	Keys(ctx context.Context) ([]string, error)
	// Close releases the store.
	Close() error
}

// validKey: session ids are an instance name, a dot and hex.
var validKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)

func checkKey(key string) error {
	if !validKey.MatchString(key) || strings.Contains(key, "..") {
		return fmt.Errorf("bad checkpoint key %q", key)
	}
	return nil
}

// Dir is a Store in a folder of the local file system (--session-store
// dir:PATH): KEY.ckpt and KEY.prev.ckpt, written to a temporary file,
// synced and renamed into place.
type Dir struct{ path string }

// OpenDir opens (and makes, private to pyrun's user) a folder store.
func OpenDir(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("session store %s: %w", path, err)
	}
	return &Dir{path: path}, nil
}

const (
	latestExt = ".ckpt"
	prevExt   = ".prev.ckpt"
)

func (d *Dir) Put(ctx context.Context, key string, data []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.path, ".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	latest := filepath.Join(d.path, key+latestExt)
	if err := os.Rename(latest, filepath.Join(d.path, key+prevExt)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, latest); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return syncDir(d.path)
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d *Dir) Get(ctx context.Context, key string) (latest, previous []byte, err error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(d.path, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	if latest, err = read(key + latestExt); err != nil {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if previous, err = read(key + prevExt); err != nil {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return latest, previous, nil
}

func (d *Dir) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	var errs []error
	for _, ext := range []string{latestExt, prevExt} {
		if err := os.Remove(filepath.Join(d.path, key+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *Dir) Keys(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, prevExt) || !strings.HasSuffix(n, latestExt) || strings.HasPrefix(n, ".") {
			continue
		}
		keys = append(keys, strings.TrimSuffix(n, latestExt))
	}
	return keys, nil
}

func (d *Dir) Close() error { return nil }

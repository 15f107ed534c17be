package checkpoint

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/pyrun/pyrun/supervisor"
)

// StoreConfig is where sessions' checkpoints are kept, what authenticates
// them and how long an instance's hold on a session lasts: pyrun's
// --session-store, --session-store-key-file and --session-lease, bound
// to it.
type StoreConfig struct {
	// Where is dir:PATH, a redis:// or rediss:// URL (Redis or Valkey),
	// or none.
	Where string
	// KeyFile holds the key that authenticates the records (ReadKeyFile).
	// "": a dir: store's own key, .key in its folder (DirKey). A redis
	// store needs one: a key made here would be this instance's alone,
	// and one kept in the store would authenticate nothing.
	KeyFile string
	// Lease is how long an instance's hold on a session lasts unless
	// renewed (SetLeases); 0: DefaultLeaseTTL.
	Lease time.Duration
}

// None is StoreConfig.Where for no checkpoints.
const None = "none"

// Enabled says whether c keeps checkpoints at all.
func (c StoreConfig) Enabled() bool { return c.Where != None }

// Validate checks the settings a user set, naming each as pyrun's flags and
// config keys do.
func (c StoreConfig) Validate() error {
	where, err := c.location()
	if err != nil {
		return err
	}
	if c.isRedis() && c.KeyFile == "" {
		return fmt.Errorf("session-store %s needs --session-store-key-file: a file of at least 32 bytes (openssl rand -hex 32 > FILE), the same for every instance that shares the store, whose key authenticates its checkpoints (or --session-store none)", where)
	}
	if c.Lease < time.Second || c.Lease > 10*time.Minute {
		return fmt.Errorf("session-lease must be between 1s and 10m, not %s", c.Lease)
	}
	return nil
}

func (c StoreConfig) isRedis() bool {
	return strings.HasPrefix(c.Where, "redis://") || strings.HasPrefix(c.Where, "rediss://")
}

// location is the folder of dir:PATH, a redis URL as it is, or "" for none.
func (c StoreConfig) location() (string, error) {
	v := c.Where
	switch {
	case v == None:
		return "", nil
	case strings.HasPrefix(v, "dir:") && len(v) > len("dir:"):
		return filepath.Clean(strings.TrimPrefix(v, "dir:")), nil
	case c.isRedis():
		if _, err := redis.ParseURL(v); err != nil {
			return "", fmt.Errorf("session-store: %w", err)
		}
		return v, nil
	}
	return "", fmt.Errorf("session-store must be dir:PATH, redis://HOST:PORT/DB or none, not %q", v)
}

// Open opens the store c names and a Keeper of pool's sessions' checkpoints
// in it, records of at most max bytes, its leases held as holder (Holder);
// nil and no error when c keeps none.
func (c StoreConfig) Open(ctx context.Context, pool *supervisor.Pool, max int64, holder string, log hclog.Logger) (*Keeper, error) {
	where, err := c.location()
	if err != nil || where == "" {
		return nil, err
	}
	var store Store
	closeStore := func() {}
	tmp := filepath.Join(where, ".restore")
	if c.isRedis() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := OpenRedis(ctx, where, max)
		if err != nil {
			return nil, err
		}
		store, closeStore = r, func() { r.Close() }
		// A restore's file is this machine's: the store is not.
		tmp = filepath.Join(os.TempDir(), fmt.Sprintf("pyrun-restore-%d", os.Getpid()))
	} else if store, err = OpenDir(where, max); err != nil { // which makes the folder
		return nil, err
	}
	// After the store: a dir: store's own key is in its folder.
	var key []byte
	if c.KeyFile != "" {
		key, err = ReadKeyFile(c.KeyFile)
	} else {
		key, err = DirKey(where) // a redis store has a key file (Validate)
	}
	if err != nil {
		closeStore()
		return nil, err
	}
	k, err := NewKeeper(store, key, pool, tmp, max, log)
	if err != nil {
		closeStore()
		return nil, err
	}
	k.SetLeases(holder, cmp.Or(c.Lease, DefaultLeaseTTL))
	return k, nil
}

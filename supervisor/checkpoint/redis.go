package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store in Redis or Valkey (--session-store redis://HOST:PORT/DB):
// keys pyrun:ckpt:KEY and pyrun:ckpt-prev:KEY. Put moves the latest to the
// previous and sets the new one in one MULTI/EXEC transaction, so a reader
// never sees half of it.
type Redis struct{ c *redis.Client }

const (
	redisLatest = "pyrun:ckpt:"
	redisPrev   = "pyrun:ckpt-prev:"
)

// OpenRedis connects to the Redis of url (redis://[user:pass@]host:port/db)
// and checks that it answers.
func OpenRedis(ctx context.Context, url string) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("session store %s: %w", url, err)
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("session store %s: %w", opt.Addr, err)
	}
	return &Redis{c: c}, nil
}

func (r *Redis) Put(ctx context.Context, key string, data []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// COPY leaves the previous as it was when there is no latest yet.
		p.Copy(ctx, redisLatest+key, redisPrev+key, 0, true)
		p.Set(ctx, redisLatest+key, data, 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

func (r *Redis) Get(ctx context.Context, key string) (latest, previous []byte, err error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	get := func(k string) ([]byte, error) {
		b, err := r.c.Get(ctx, k).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return b, err
	}
	if latest, err = get(redisLatest + key); err != nil {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if previous, err = get(redisPrev + key); err != nil {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return latest, previous, nil
}

func (r *Redis) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return r.c.Del(ctx, redisLatest+key, redisPrev+key).Err()
}

func (r *Redis) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	it := r.c.Scan(ctx, 0, redisLatest+"*", 100).Iterator()
	for it.Next(ctx) {
		keys = append(keys, strings.TrimPrefix(it.Val(), redisLatest))
	}
	return keys, it.Err()
}

func (r *Redis) Close() error { return r.c.Close() }

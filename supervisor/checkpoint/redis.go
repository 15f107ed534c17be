package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store in Redis or Valkey (--session-store redis://HOST:PORT/DB):
// keys pyrun:ckpt:KEY and pyrun:ckpt-prev:KEY, their sequence numbers
// pyrun:ckpt-seq:KEY, and the lease (lease.go) pyrun:lease:KEY. Put checks the lease, moves the latest to the previous
// and sets the new one in one Lua script, so a reader never sees half of
// it and a stale holder never writes.
type Redis struct {
	c         *redis.Client
	maxRecord int64 // the largest record read (MaxRecord)
}

const (
	redisLatest = "pyrun:ckpt:"
	redisPrev   = "pyrun:ckpt-prev:"
	redisSeq    = "pyrun:ckpt-seq:"  // a hash: latest, previous
	redisLease  = "pyrun:lease:"     // a hash: holder, gen, move; expires with the lease
	redisGen    = "pyrun:lease-gen:" // the key's last lease generation
)

// OpenRedis connects to the Redis of url (redis://[user:pass@]host:port/db)
// and checks that it answers. maxRaw bounds a checkpoint's raw bytes
// (--max-checkpoint; 0: the default): a value larger than such a
// checkpoint's record can be is not read.
func OpenRedis(ctx context.Context, url string, maxRaw int64) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("session store %s: %w", url, err)
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("session store %s: %w", opt.Addr, err)
	}
	return &Redis{c: c, maxRecord: MaxRecord(maxRaw)}, nil
}

// acquireLua takes a lease (KEYS: lease, generation counter; ARGV: holder,
// ttl ms), the same for a seize (lease.go) once the dead holder's is gone.
const acquireLua = `
local h = redis.call('HGET', KEYS[1], 'holder')
if h and h ~= ARGV[1] then
  return {0, h, redis.call('PTTL', KEYS[1])}
end
local g
if h then
  g = tonumber(redis.call('HGET', KEYS[1], 'gen'))
else
  g = redis.call('INCR', KEYS[2])
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'gen', g)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, ARGV[1], g}`

// The scripts run atomically in Redis: a lease's check and the write it
// guards are one step.
var (
	// KEYS: lease, generation counter. ARGV: holder, ttl ms.
	acquireScript = redis.NewScript(acquireLua)
	// KEYS: lease. ARGV: holder, gen, ttl ms. -1: not in force.
	renewScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[1], 'move') then return 1 end
return 0`)
	// KEYS: lease. ARGV: holder, gen.
	releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1`)
	// KEYS: records. ARGV: the most bytes one is read. For each key, two
	// entries: 0, "" (none); 1, the record; 2, its length (past the
	// bound); 3, its type (not a string).
	getScript = redis.NewScript(`
local out = {}
for _, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k).ok
  if t == 'none' then
    table.insert(out, 0) table.insert(out, '')
  elseif t ~= 'string' then
    table.insert(out, 3) table.insert(out, t)
  else
    local n = redis.call('STRLEN', k)
    if n > tonumber(ARGV[1]) then
      table.insert(out, 2) table.insert(out, tostring(n))
    else
      table.insert(out, 1) table.insert(out, redis.call('GET', k))
    end
  end
end
return out`)
	// KEYS: lease, latest, previous, sequence numbers. ARGV: holder, gen,
	// record, its sequence number. COPY leaves the previous as it was when
	// there is no latest yet. -1: the number is not past the latest's.
	putScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then
  return 0
end
local had = tonumber(redis.call('HGET', KEYS[4], 'latest') or '0')
if tonumber(ARGV[4]) <= had then
  return -1
end
redis.call('COPY', KEYS[2], KEYS[3], 'REPLACE')
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[4], 'latest', ARGV[4], 'previous', had)
return 1`)
	// KEYS: lease, latest, previous, generation counter, sequence numbers.
	// ARGV: holder, gen.
	deleteScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return 1`)
)

func (r *Redis) Put(ctx context.Context, key string, data Record, seq uint64, fence Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	// A Redis value is sent whole: the record is in memory once.
	b := make([]byte, data.Size())
	if _, err := data.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	n, err := putScript.Run(ctx, r.c, []string{redisLease + key, redisLatest + key, redisPrev + key, redisSeq + key},
		fence.Holder, fence.Gen, b, seq).Int()
	switch {
	case err != nil:
		return fmt.Errorf("write checkpoint: %w", err)
	case n < 0:
		return fmt.Errorf("write checkpoint: %w: record %d", ErrReplay, seq)
	case n != 1:
		return fmt.Errorf("write checkpoint: %w", ErrLeaseLost)
	}
	return nil
}

func (r *Redis) Seqs(ctx context.Context, key string) (latest, previous uint64, err error) {
	if err := checkKey(key); err != nil {
		return 0, 0, err
	}
	v, err := r.c.HMGet(ctx, redisSeq+key, "latest", "previous").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	num := func(x any) uint64 {
		s, _ := x.(string)
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	return num(v[0]), num(v[1]), nil
}

func (r *Redis) Get(ctx context.Context, key string, previous bool) (Record, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	k := redisLatest + key
	if previous {
		k = redisPrev + key
	}
	// Only a value within the bound: a record is never read past what a
	// checkpoint's can be.
	v, err := getScript.Run(ctx, r.c, []string{k}, r.maxRecord).Slice()
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("read checkpoint: unexpected answer of %d entries", len(v))
	}
	tag, _ := v[0].(int64)
	val, _ := v[1].(string)
	switch tag {
	case 1:
		return NewRecord([]byte(val)), nil
	case 2:
		return nil, fmt.Errorf("read checkpoint: %w: %s is %s bytes, past the %d a record can be", ErrCorrupt, key, val, r.maxRecord)
	case 3:
		return nil, fmt.Errorf("read checkpoint: %w: %s is a Redis %s, not a string", ErrCorrupt, key, val)
	}
	return nil, nil
}

func (r *Redis) Delete(ctx context.Context, key string, fence Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	n, err := deleteScript.Run(ctx, r.c, []string{redisLease + key, redisLatest + key, redisPrev + key, redisGen + key, redisSeq + key},
		fence.Holder, fence.Gen).Int()
	if err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("delete checkpoint: %w", ErrLeaseLost)
	}
	return nil
}

func (r *Redis) Acquire(ctx context.Context, key, holder string, ttl time.Duration) (Lease, error) {
	if err := checkKey(key); err != nil {
		return Lease{}, err
	}
	v, err := acquireScript.Run(ctx, r.c, []string{redisLease + key, redisGen + key}, holder, ttl.Milliseconds()).Slice()
	return leaseAnswer(key, v, err)
}

func (r *Redis) Renew(ctx context.Context, key string, l Lease, ttl time.Duration) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	n, err := renewScript.Run(ctx, r.c, []string{redisLease + key}, l.Holder, l.Gen, ttl.Milliseconds()).Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("session lease: %w", err)
	case n < 0:
		return false, ErrLeaseLost
	}
	return n == 1, nil
}

func (r *Redis) Release(ctx context.Context, key string, l Lease) error {
	if err := checkKey(key); err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, r.c, []string{redisLease + key}, l.Holder, l.Gen).Int()
	switch {
	case err != nil:
		return fmt.Errorf("session lease: %w", err)
	case n != 1:
		return ErrLeaseLost
	}
	return nil
}

func (r *Redis) WantMove(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	// HSET on an expired (absent) lease would make one without a holder:
	// only a live lease is marked.
	return r.c.Eval(ctx, `if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'move', '1') end return 0`,
		[]string{redisLease + key}).Err()
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

// leaseAnswer reads the acquire and seize scripts' answer, {ok, holder,
// gen or ms left}: the lease got, or who holds it and until when.
func leaseAnswer(key string, v []any, err error) (Lease, error) {
	if err != nil {
		return Lease{}, fmt.Errorf("session lease: %w", err)
	}
	if len(v) != 3 {
		return Lease{}, fmt.Errorf("session lease: unexpected answer %v", v)
	}
	who, _ := v[1].(string)
	n, _ := v[2].(int64)
	if ok, _ := v[0].(int64); ok != 1 {
		return Lease{}, &HeldError{Key: key, Holder: who, Expires: time.Now().Add(time.Duration(n) * time.Millisecond)}
	}
	return Lease{Holder: who, Gen: n}, nil
}

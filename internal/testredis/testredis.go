// Package testredis gives tests a Redis: miniredis by default, a real redis-server when
// REDIS_ADDR is set (make test sets it), a Redis Cluster when REDIS_CLUSTER_ADDRS is
// set (host:port,host:port,…). Each call gets its own key prefix, so tests run
// in parallel on one server, and every script call is checked to keep its keys in one
// cluster slot.
package testredis

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// Redis is a client with its own key prefix.
type Redis struct {
	Client redis.UniversalClient
	Prefix string
	// Mini is the miniredis server when no real one is configured.
	Mini *miniredis.Miniredis
}

// Real reports whether tests run against a real redis-server (or cluster).
func Real() bool { return os.Getenv("REDIS_ADDR") != "" || Cluster() }

// Cluster reports whether tests run against a Redis Cluster.
func Cluster() bool { return os.Getenv("REDIS_CLUSTER_ADDRS") != "" }

// New returns a Redis for one test; it is cleaned up with the test.
func New(tb testing.TB) *Redis {
	tb.Helper()
	r := &Redis{Prefix: "t" + warmpool.NewID()[:12] + ":"}
	if !Real() {
		r.Mini = miniredis.RunT(tb)
	}
	r.Client = r.dial()
	r.Client.AddHook(SlotHook(tb))
	tb.Cleanup(func() {
		if r.Mini == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r.ForEachServer(ctx, func(ctx context.Context, c *redis.Client) error {
				iter := c.Scan(ctx, 0, r.Prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					c.Del(ctx, iter.Val())
				}
				return nil
			})
		}
		_ = r.Client.Close()
	})
	return r
}

// dial opens a client of the test's server, with the options a replica uses (one
// retry, bounded dials).
func (r *Redis) dial() redis.UniversalClient {
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), DialTimeout: 2 * time.Second, MaxRetries: 1})
	}
	addr := os.Getenv("REDIS_ADDR")
	if r.Mini != nil {
		addr = r.Mini.Addr()
	}
	return redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, MaxRetries: 1})
}

// NewClient opens another client of the same server, as another replica would; it is
// closed with the test.
func (r *Redis) NewClient(tb testing.TB) redis.UniversalClient {
	c := r.dial()
	c.AddHook(SlotHook(tb))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ForEachServer runs fn on the one server, or on every master of a cluster.
func (r *Redis) ForEachServer(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	switch c := r.Client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unexpected client %T", r.Client)
}

// DeleteAll deletes every key of this test's prefix, as a Redis that lost its data
// would look to the test.
func (r *Redis) DeleteAll(ctx context.Context) error {
	return r.ForEachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, r.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
}

// NeedReal skips the test unless a real redis-server is configured: some behaviour
// (Redis's own Lua interpreter, script loading) only a real server shows.
func NeedReal(tb testing.TB) {
	tb.Helper()
	if !Real() {
		tb.Skip("needs a real redis-server: set REDIS_ADDR (make test does)")
	}
}

// SlotHook fails the test when one EVAL/EVALSHA names keys of more than one cluster
// slot: every script must run unchanged on Redis Cluster, which miniredis cannot check.
// It is a hook for every command (EachCommand).
func SlotHook(tb testing.TB) EachCommand {
	return func(cmd redis.Cmder) { checkSlots(tb, cmd) }
}

var reported sync.Map

func checkSlots(tb testing.TB, cmd redis.Cmder) {
	keys := ScriptKeys(cmd)
	if len(keys) < 2 {
		return
	}
	slot := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != slot {
			msg := fmt.Sprintf("script keys span cluster slots: %q (slot %d) and %q (slot %d)", keys[0], slot, k, Slot(k))
			if _, dup := reported.LoadOrStore(msg, true); !dup {
				tb.Errorf("%s", msg)
			}
			return
		}
	}
}

// ScriptKeys returns the KEYS of an EVAL/EVALSHA command, or nil for other commands.
func ScriptKeys(cmd redis.Cmder) []string {
	args := cmd.Args()
	if len(args) < 3 {
		return nil
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "eval" && name != "evalsha" && name != "evalsha_ro" && name != "eval_ro" {
		return nil
	}
	var n int
	switch v := args[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	default:
		fmt.Sscan(fmt.Sprint(v), &n)
	}
	keys := make([]string, 0, n)
	for i := 0; i < n && 3+i < len(args); i++ {
		keys = append(keys, fmt.Sprint(args[3+i]))
	}
	return keys
}

// Slot is the Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, mod 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(key)) % 16384)
}

func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

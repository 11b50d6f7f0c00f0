// Package testredis gives tests a Redis: miniredis by default, a real redis-server when
// REDIS_ADDR is set (make test sets it), a Redis Cluster when REDIS_CLUSTER_ADDRS is
// set (host:port,host:port,…). Each call gets its own key prefix under wp:, so tests
// run in parallel on one server, and every script call is checked to keep its keys in
// one cluster slot. On a real Redis, warmpool's connection is the README's ACL user
// (acl.go).
package testredis

import (
	"context"
	"fmt"
	"os"
	"strconv"
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
	// Client is warmpool's connection: on a real Redis it connects as the README's ACL
	// user, so a command the README's line does not allow fails with NOPERM.
	Client redis.UniversalClient
	// Admin connects as the default user, for the set-up, inspection and cleanup that
	// need commands the ACL user lacks (SCAN, TTL, FLUSHDB, DEBUG …). On miniredis both
	// clients are the same.
	Admin  redis.UniversalClient
	Prefix string
	// Mini is the miniredis server when no real one is configured.
	Mini *miniredis.Miniredis
}

// Real reports whether tests run against a real redis-server (or cluster).
func Real() bool { return os.Getenv("REDIS_ADDR") != "" || Cluster() }

// Cluster reports whether tests run against a Redis Cluster.
func Cluster() bool { return os.Getenv("REDIS_CLUSTER_ADDRS") != "" }

// New returns a Redis for one test; it is cleaned up with the test. Its keys are under
// wp:, the keys the README's ACL user may touch.
func New(tb testing.TB) *Redis {
	tb.Helper()
	r := &Redis{Prefix: "wp:t" + warmpool.NewID()[:12] + ":"}
	if !Real() {
		r.Mini = miniredis.RunT(tb)
		r.Client = r.dial(false)
		r.Admin = r.Client
	} else {
		r.Admin = r.dial(false)
		if err := ensureACLUser(r.Admin); err != nil {
			tb.Fatal(err)
		}
		r.Client = r.dial(true)
	}
	r.Client.AddHook(SlotHook(tb))
	tb.Cleanup(func() {
		if r.Mini == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.DeleteAll(ctx)
			if err := commandsRefused(ctx, r.Admin); err != nil {
				tb.Error(err)
			}
			_ = r.Admin.Close()
		}
		_ = r.Client.Close()
	})
	return r
}

// users records the servers where this process created the ACL user: once each.
var users sync.Map

// EnsureACLUser creates the README's ACL user on the configured real Redis (REDIS_ADDR,
// or every master of REDIS_CLUSTER_ADDRS), for tests that hand its URL to processes;
// at the test's end a command refused to the user (the processes' too) fails it.
func EnsureACLUser(tb testing.TB) {
	tb.Helper()
	if !Real() {
		tb.Fatal("EnsureACLUser needs a real Redis: set REDIS_ADDR or REDIS_CLUSTER_ADDRS")
	}
	admin := (&Redis{}).dial(false)
	if err := ensureACLUser(admin); err != nil {
		_ = admin.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := commandsRefused(ctx, admin); err != nil {
			tb.Error(err)
		}
		_ = admin.Close()
	})
}

// ensureACLUser creates the README's ACL user on the test server (every master of a
// cluster) through admin, once per process.
func ensureACLUser(admin redis.UniversalClient) error {
	key := os.Getenv("REDIS_ADDR") + "|" + os.Getenv("REDIS_CLUSTER_ADDRS")
	once, _ := users.LoadOrStore(key, sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return forEachServer(ctx, admin, func(ctx context.Context, c *redis.Client) error {
			return setUser(ctx, c, ACLUser, "wp:")
		})
	}))
	return once.(func() error)()
}

// dial opens a client of the test's server, with the options a replica uses (one
// retry, bounded dials); asUser connects as the README's ACL user.
func (r *Redis) dial(asUser bool) redis.UniversalClient {
	var user, password string
	if asUser {
		user, password = ACLUser, ACLPassword
	}
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), Username: user, Password: password,
			DialTimeout: 2 * time.Second, MaxRetries: 1})
	}
	addr := os.Getenv("REDIS_ADDR")
	if r.Mini != nil {
		addr = r.Mini.Addr()
	}
	return redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, DialTimeout: 2 * time.Second, MaxRetries: 1})
}

// NewClient opens another client of the same server as warmpool's connection (the ACL
// user on a real Redis), as another replica would; it is closed with the test.
func (r *Redis) NewClient(tb testing.TB) redis.UniversalClient {
	c := r.dial(r.Mini == nil)
	c.AddHook(SlotHook(tb))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// URL is a redis:// URL of the test's one server (not a cluster) for warmpool's own
// connection: the ACL user on a real Redis.
func (r *Redis) URL() string {
	if r.Mini != nil {
		return "redis://" + r.Mini.Addr() + "/0"
	}
	return UserURL(os.Getenv("REDIS_ADDR"))
}

// UserURL is the redis:// URL of the README's ACL user on the server at addr.
func UserURL(addr string) string {
	return "redis://" + ACLUser + ":" + ACLPassword + "@" + addr + "/0"
}

// PrefixUserURL creates on the test server of REDIS_ADDR the README's ACL user for a
// deployment whose --prefix is prefix (see setUser), and returns its --redis URL.
func PrefixUserURL(tb testing.TB, prefix string) string {
	tb.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		tb.Fatal("PrefixUserURL needs a real Redis: set REDIS_ADDR")
	}
	user := ACLUser + "-" + strings.Trim(prefix, ":")
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := setUser(ctx, admin, user, prefix); err != nil {
		tb.Fatal(err)
	}
	return "redis://" + user + ":" + ACLPassword + "@" + addr + "/0"
}

// ClusterUserURL is the --redis URL of the README's ACL user on the Redis Cluster of
// REDIS_CLUSTER_ADDRS.
func ClusterUserURL() string {
	return "redis+cluster://" + ACLUser + ":" + ACLPassword + "@" + os.Getenv("REDIS_CLUSTER_ADDRS")
}

// ForEachServer runs fn on the one server, or on every master of a cluster, through
// the admin connection.
func (r *Redis) ForEachServer(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	return forEachServer(ctx, r.Admin, fn)
}

func forEachServer(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, c *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unexpected client %T", client)
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
	name := strings.ToLower(Arg(args[0]))
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
		n, _ = strconv.Atoi(Arg(v)) // not a number: no keys to check
	}
	keys := make([]string, 0, n)
	for i := 0; i < n && 3+i < len(args); i++ {
		keys = append(keys, Arg(args[3+i]))
	}
	return keys
}

// Arg is a command argument as Redis gets it. Strings, the common case, are
// taken as they are: this runs on every command of every test and benchmark, where
// fmt.Sprint cost a route of server.BenchmarkHTTPRouteAffinity 20 allocations.
func Arg(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *string:
		return *v
	}
	return fmt.Sprint(v)
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

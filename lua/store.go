package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// Store runs the scripts and turns their answers into typed results and domain errors.
// It is the only holder of the Redis client: no other package talks to Redis.
type Store struct {
	rdb  redis.UniversalClient
	keys Keyspace
	// wait is how long rdb waits for an answer before it gives up on a call (its read
	// timeout), 0 when it waits as long as the context lets it.
	wait time.Duration
	// onScript is told how long each script call took (ObserveScripts).
	onScript func(script string, took time.Duration)
}

// NewStore returns a Store over rdb with the given key prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: NewKeyspace(prefix), wait: readTimeout(rdb), onScript: func(string, time.Duration) {}}
}

// ObserveScripts makes the store tell f how long each script call took, by script
// name (the file name without ".lua"), failed calls included. Call it before the
// store is used; f must not block.
func (s *Store) ObserveScripts(f func(script string, took time.Duration)) {
	s.onScript = f
}

// readTimeout is the read timeout of a go-redis client (its options say -1 or 0 when it
// has none), or 0 when the client is of another kind.
func readTimeout(rdb redis.UniversalClient) time.Duration {
	var d time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	}
	return max(d, 0)
}

// deadline is when the caller of a script stops waiting for its answer: ctx's
// deadline, or the client's read timeout from now, whichever comes first; "0" for
// none. It is wall-clock time, compared with Redis's own clock by _guard.lua, so it
// never comes from an injected Clock.
func (s *Store) deadline(ctx context.Context) string {
	var d time.Time
	if s.wait > 0 {
		d = time.Now().Add(s.wait)
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d = cd
	}
	if d.IsZero() {
		return "0"
	}
	return ms(d)
}

// Keys is the store's keyspace.
func (s *Store) Keys() Keyspace { return s.keys }

// Ping checks that Redis answers. Errors: STORE_UNAVAILABLE.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// CleanupTimeout bounds a cleanup path (giving back a claim, leaving a queue, releasing
// a lock), which runs even when the caller has gone.
const CleanupTimeout = 5 * time.Second

// CleanupContext is the context of a cleanup path: ctx's values without its
// cancellation, bounded by CleanupTimeout.
func CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// ms formats a time as Redis's unit, milliseconds since the epoch.
func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// GrantTTL is how long a slot handed to a waiter stays its own: a waiter that has not
// bound it by then (it died, or missed its wake-up and its re-check) loses it to the next.
const GrantTTL = 5 * time.Second

// handoffArgs are the last ARGV of every script that frees slots: the deadline of a
// grant made now and the command that publishes on the scope's wake-up channel.
func (s *Store) handoffArgs(now time.Time) []any {
	return []any{ms(now.Add(GrantTTL)), s.publishCmd()}
}

// publishCmd is the command that publishes on a scope's wake-up channel: SPUBLISH on a
// Cluster, else PUBLISH.
func (s *Store) publishCmd() string {
	if s.cluster() {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// cluster reports whether Redis is a Cluster, where wake-ups use sharded pub/sub.
func (s *Store) cluster() bool {
	_, ok := s.rdb.(*redis.ClusterClient)
	return ok
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// call runs a script and returns its answer for reading (see reply). A guarded script
// gets the caller's deadline as its last ARGV. call maps transport failures, and a
// guarded script's refusal to run past the deadline, to STORE_UNAVAILABLE, and the
// scripts' EPOCH_LOST and NO_SCOPE answers to domain errors.
func (s *Store) call(ctx context.Context, sc *script, scope string, keys []string, args ...any) (*reply, error) {
	if sc.guarded {
		args = append(args[:len(args):len(args)], s.deadline(ctx))
	}
	if sc.due {
		k := s.keys.Scope(scope)
		keys = append(keys[:len(keys):len(keys)], k.Config, k.Due)
	}
	start := time.Now()
	v, err := sc.Run(ctx, s.rdb, keys, args...).Result()
	s.onScript(sc.metric, time.Since(start))
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	if sc.due {
		v = s.noted(ctx, scope, v)
	}
	r := newReply(sc.name, v)
	if len(r.fields) > 0 {
		switch r.fields[0] {
		case "EPOCH_LOST":
			return nil, warmpool.ErrEpochLost
		case "NO_SCOPE":
			return nil, s.noScope(ctx, scope)
		case "DEADLINE":
			return nil, &warmpool.Error{Code: warmpool.CodeStoreUnavailable, RetryAfter: 1,
				Message: sc.name + ": Redis ran the call after its caller's deadline, so it did nothing"}
		}
	}
	return r, nil
}

// noScope tells an unknown scope from a Redis that lost every key: when the global
// epoch is missing too, the data is gone and requests fail closed.
func (s *Store) noScope(ctx context.Context, scope string) error {
	live, err := s.EpochLive(ctx)
	if err != nil {
		return err
	}
	if !live {
		return warmpool.ErrEpochLost
	}
	return warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has no config", scope)
}

// redisErr maps a go-redis error: a cancelled context passes through, a script or
// command bug is INTERNAL, anything about reaching Redis is STORE_UNAVAILABLE.
func (s *Store) redisErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK"} {
			if strings.HasPrefix(msg, p) {
				return &warmpool.Error{Code: warmpool.CodeStoreUnavailable, Message: "redis: " + msg, RetryAfter: 1}
			}
		}
		return fmt.Errorf("redis script: %w", err)
	}
	return &warmpool.Error{Code: warmpool.CodeStoreUnavailable, Message: "redis unavailable: " + err.Error(), RetryAfter: 1}
}

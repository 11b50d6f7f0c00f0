package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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
	// sweepPeriod is the sweep's tick (SweepPeriod), part of a refill's lead time in
	// the demand policy's target.
	sweepPeriod time.Duration
	// onDueFailure is told each failed due-index write (ObserveDueIndexFailures);
	// dueRetries keeps those writes for RetryDueIndex.
	onDueFailure func()
	dueRetries   dueRetries
	// wall is the replica's wall clock (time.Now; never an injected Clock), of the
	// guarded calls' deadlines and the clock skew measurements; skew is the last
	// measurement's ClockSkew.Guard in nanoseconds (MeasureClockSkew), taken off each
	// deadline.
	wall func() time.Time
	skew atomic.Int64
	// refusals counts the calls a tenant's quota refused (QuotaRefusals).
	refusals quotaRefusals
	// total is the cap over every pod (MaxPodsTotal, 0: none); governedAll says that
	// this replica's first balance pass under it governed every scope.
	total       atomic.Int64
	governedAll atomic.Bool
}

// DefaultSweepPeriod is the sweep tick the demand target assumes unless SweepPeriod
// says otherwise: the sweeper's default interval.
const DefaultSweepPeriod = 2 * time.Second

// SweepPeriod tells the store the sweep's tick (a refill starts at most this long after
// a take makes the scope due): the demand policy's target stocks for a deploy time
// plus this. Call it before the store is used; d <= 0 keeps DefaultSweepPeriod.
func (s *Store) SweepPeriod(d time.Duration) {
	if d > 0 {
		s.sweepPeriod = d
	}
}

// NewStore returns a Store over rdb with the given key prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: NewKeyspace(prefix), wait: readTimeout(rdb), onScript: func(string, time.Duration) {},
		onDueFailure: func() {}, sweepPeriod: DefaultSweepPeriod, wall: time.Now}
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

// run is the script runner: it runs a script with its keys and arguments as given
// (EVALSHA, falling back to EVAL when Redis lacks the script), tells ObserveScripts
// how long it took, and maps a failure to an error (redisErr). What the script's
// answer means is for the call protocol (protocol.go) and the wrappers.
func (s *Store) run(ctx context.Context, sc *script, argv []any) (any, error) {
	start := time.Now()
	v, err := s.eval(ctx, argv)
	if errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", sc.src
		v, err = s.eval(ctx, argv)
	}
	s.onScript(sc.metric, time.Since(start))
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	return v, nil
}

// eval sends argv, an EVALSHA or EVAL command whose first key is its fourth
// argument, as go-redis's Script.Run does.
func (s *Store) eval(ctx context.Context, argv []any) (any, error) {
	cmd := redis.NewCmd(ctx, argv...)
	if argv[2] != 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = s.rdb.Process(ctx, cmd)
	return cmd.Result()
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

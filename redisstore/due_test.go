package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// swept has e's scope looked at by the due sweep, which finds nothing due (and so takes
// it out of the due index), and returns its shard's key of the due index.
func (e *env) swept() string {
	e.t.Helper()
	if _, ok, err := e.store.ScopeDue(context.Background(), e.scope, e.now); err != nil || ok {
		e.t.Fatalf("due sweep of a new scope: due %v, %v; want nothing due", ok, err)
	}
	return e.store.Keys().DueIndex(redisstore.DueShard(e.scope))
}

// indexedAt is the scope's time in the due index, +Inf when it is not indexed.
func (e *env) indexedAt(key string) float64 {
	e.t.Helper()
	score, err := e.r.Client.ZScore(context.Background(), key, e.scope).Result()
	if err == redis.Nil {
		return math.Inf(1)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return score
}

// acquireArgs take a claim and a deploy lease that end in 30 s: due work the script
// notes.
func (e *env) acquireArgs(claim string) redisstore.AcquireArgs {
	return redisstore.AcquireArgs{Now: e.now, Claim: claim, ClaimDeadline: e.now.Add(30 * time.Second),
		LeaseDeadline: e.now.Add(30 * time.Second), RoomMargin: 10 * time.Second}
}

// cancelAfterScripts is a go-redis hook that cancels a context as soon as a script's
// answer came back (not a NOSCRIPT error, which the EVAL after it follows), as a client that disconnects right after its call ran does.
type cancelAfterScripts struct{ cancel context.CancelFunc }

func (c cancelAfterScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c cancelAfterScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && len(testredis.ScriptKeys(cmd)) > 0 {
			c.cancel()
		}
		return err
	}
}

func (c cancelAfterScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A due note outlives its caller: the index write after the script runs with a context
// the caller cannot cancel. Before, a client that went away right after the script
// (the write then used its cancelled context) left the scope out of the due sweeps: a session outlived its TTL through three due ticks.
func TestDueNoteOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	key := e.swept()
	client := e.r.NewClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client.AddHook(cancelAfterScripts{cancel})
	store := redisstore.NewStore(client, e.r.Prefix)
	if _, err := store.PodAcquire(ctx, e.scope, e.acquireArgs("c1")); err != nil {
		t.Fatal(err)
	}
	if got, want := e.indexedAt(key), float64(e.now.Add(30*time.Second).UnixMilli()); got > want {
		t.Fatalf("indexed at %v after a note of %v whose caller went away: the index write was lost", got, want)
	}
}

// A due-index write that fails (Redis unreachable for a moment, the Cluster node of
// the shard down) does not fail the call, whose script has committed: it is counted
// (ObserveDueIndexFailures, the metric warmpool_due_index_write_failures_total) and
// kept, and RetryDueIndex writes it once Redis answers, so the scope is not left out
// of the due sweeps until the hourly audit.
func TestDueIndexWriteFailureIsCountedAndRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	key := e.swept()
	client := e.r.NewClient(t)
	fail := testredis.FailCommands(2, testredis.Named("zadd", key))
	client.AddHook(fail)
	store := redisstore.NewStore(client, e.r.Prefix)
	failures := 0
	store.ObserveDueIndexFailures(func() { failures++ })
	ctx := context.Background()
	if _, err := store.PodAcquire(ctx, e.scope, e.acquireArgs("c1")); err != nil {
		t.Fatalf("acquire whose index write failed: %v, want its answer", err)
	}
	due := float64(e.now.Add(30 * time.Second).UnixMilli())
	if failures != 1 || e.indexedAt(key) <= due {
		t.Fatalf("%d failures counted, indexed at %v; want 1 and the write not made", failures, e.indexedAt(key))
	}
	if err := store.RetryDueIndex(ctx); err == nil || failures != 2 {
		t.Fatalf("retry while the shard fails: %v, %d failures; want an error and 2", err, failures)
	}
	if err := store.RetryDueIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.indexedAt(key); got > due {
		t.Fatalf("indexed at %v after the retry, want %v at the latest", got, due)
	}
	if err := store.RetryDueIndex(ctx); err != nil || fail.Failed() != 2 || failures != 2 {
		t.Fatalf("a retry with nothing left: %v (%d commands failed, %d counted)", err, fail.Failed(), failures)
	}
}

// A pool short of warm pods is due at once until its refill is started: the full
// pass's audit of the due index (ScopeReindex) between a publish's note and the
// sweep's visit kept nothing due, took the scope out of the index, and no refill ever
// ran (seen in the fault matrix: a scope with min_idle_pods 2 and no pod, for good).
// Once the refill's deploys are in flight, what is due is their leases' end.
func TestDueKeepsARefillDueUntilItStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 2 })
	ctx := context.Background()
	key := e.store.Keys().DueIndex(redisstore.DueShard(e.scope))
	if _, err := e.store.ScopeReindex(ctx, e.scope, e.now); err != nil {
		t.Fatal(err)
	}
	if got := e.indexedAt(key); got > float64(e.now.UnixMilli()) {
		t.Fatalf("indexed at %v after the audit; want the refill due at once (%v)", got, e.now.UnixMilli())
	}
	lease := e.now.Add(30 * time.Second)
	for range 2 {
		res, err := e.store.PodPlaceholder(ctx, e.scope, e.now, lease, lease)
		if err != nil || res.Kind != redisstore.PlaceholderDeploy {
			t.Fatalf("refill: %+v, %v", res, err)
		}
	}
	at, ok, err := e.store.ScopeDue(ctx, e.scope, e.now)
	if err != nil || !ok || !at.Equal(lease) {
		t.Fatalf("due %v, %v, %v with the refill in flight; want the leases' end %v", at, ok, err, lease)
	}
}

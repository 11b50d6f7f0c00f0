package sweeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/sweeper"
)

// benchScopes is one replica (with its sweeper, on the harness's clock) over n scopes
// of one idle pod each, deployed through the replica.
func benchScopes(b *testing.B, n int, mutate ...func(*warmpool.ScopeConfig)) (*replicatest.Harness, *replicatest.Replica, []string) {
	configs, err := sqlite.Open(context.Background(), ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = configs.Close() })
	h := replicatest.New(b, replicatest.WithConfigs(configs))
	r := h.Replica(replicatest.Config{Clock: h.Clock, Sweeper: sweeper.Config{PassDuty: 1}})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%03d", i)
		h.Scope(ids[i], 2, 2, mutate...)
	}
	deployAll(b, r, ids)
	return h, r, ids
}

// deployAll gives every scope an idle pod: a cold acquire, its claim given back.
func deployAll(b *testing.B, r *replicatest.Replica, ids []string) {
	ctx := context.Background()
	for _, id := range ids {
		l, err := r.RM.Acquire(ctx, id)
		if err != nil {
			b.Fatalf("acquire %s: %v", id, err)
		}
		if err := r.RM.ReleaseClaim(ctx, id, l.Claim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweepShards measures the due jobs' work: every shard's tick over 100
// scopes whose idle pods are past pod_ttl_s, which it reclaims (deletes); each
// iteration deploys the pods again first, off the clock.
func BenchmarkSweepShards(b *testing.B) {
	h, r, ids := benchScopes(b, 100, func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS = 60 })
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		h.Clock.Advance(2 * time.Minute)
		b.StartTimer()
		for shard := range redisstore.DueShards {
			if err := r.Sweeper.SweepShard(ctx, shard); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if idle := len(h.Snap(ids[0]).Pods); idle != 0 {
			b.Fatalf("scope %s kept %d pods past pod_ttl_s", ids[0], idle)
		}
		deployAll(b, r, ids)
		b.StartTimer()
	}
}

// BenchmarkWatch measures the watch jobs' work: every shard's tick over 200 pods, each
// probed once (the clock moves a probe period a tick).
func BenchmarkWatch(b *testing.B) {
	h, r, _ := benchScopes(b, 200)
	ctx := context.Background()
	for b.Loop() {
		h.Clock.Advance(warmpool.DefaultProbePeriodS * time.Second)
		if err := r.Sweeper.Watch(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

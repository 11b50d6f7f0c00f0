package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/cputime"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// fillPools publishes n scopes and writes pool state into scope i's keys directly:
// i%3 pods (the first of an old deploy_ver when i%3 == 2), the last one idle, i%4
// sessions, i%2 deploys in flight with as many followers, i%5 waiters.
func fillPools(tb testing.TB, store *redisstore.Store, rdb redis.UniversalClient, n int) {
	tb.Helper()
	ctx := context.Background()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 12, 3
	if err := cfg.Normalize(); err != nil {
		tb.Fatal(err)
	}
	ver := cfg.Deploy.DeployVer()
	pipe := rdb.Pipeline()
	for i := range n {
		scope := fmt.Sprintf("scope-%04d", i)
		if err := store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: scope, Config: cfg, Version: int64(1 + i%7), DeployVer: ver}); err != nil {
			tb.Fatal(err)
		}
		k := store.Keys().Scope(scope)
		for p := range i % 3 {
			pod := fmt.Sprintf("p%d", p)
			pipe.ZAdd(ctx, k.Pods, redis.Z{Score: float64(p), Member: pod})
			pv := ver
			if p == 0 && i%3 == 2 {
				pv = "old"
			}
			pipe.HSet(ctx, k.PodVer, pod, pv)
			if p == i%3-1 {
				pipe.ZAdd(ctx, k.Idle, redis.Z{Score: 1, Member: pod})
			}
		}
		for s := range i % 4 {
			pipe.HSet(ctx, k.Sessions, fmt.Sprintf("s%d", s), "p0")
		}
		for d := range i % 2 {
			pipe.ZAdd(ctx, k.Deploying, redis.Z{Score: 1, Member: fmt.Sprint(d)})
			pipe.ZAdd(ctx, k.Followers, redis.Z{Score: 1, Member: fmt.Sprintf("%d|c%d", d, d)})
		}
		for w := range i % 5 {
			pipe.ZAdd(ctx, k.Waiters, redis.Z{Score: 1, Member: fmt.Sprintf("w%d", w)})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
}

// ScopeSummaries reads what Counts reads (the gauges' pass), with pod_concurrency,
// and leaves out what Counts leaves out: a deleted scope and an id in the index that
// was never published. It recovers by itself when Redis has lost its scripts.
func TestScopeSummariesMatchCounts(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	store := redisstore.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	// More scopes than one pipeline reads, so that the batches join up.
	fillPools(t, store, r.Client, 2*redisstore.SummaryBatch+30)
	if _, err := store.Bootstrap(ctx, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ScopeDelete(ctx, "scope-0004", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.SAdd(ctx, store.Keys().Scopes(), "never-published").Err(); err != nil {
		t.Fatal(err)
	}
	want, err := store.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2*redisstore.SummaryBatch+29 {
		t.Fatalf("Counts: %d scopes, want %d", len(want), 2*redisstore.SummaryBatch+29)
	}
	check := func(when string) {
		t.Helper()
		got, err := store.ScopeSummaries(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d summaries, want %d", when, len(got), len(want))
		}
		for i := range got {
			if got[i].ScopeCounts != want[i] || got[i].PodConcurrency != 3 {
				t.Fatalf("%s: summary %d %+v, want %+v and pod_concurrency 3", when, i, got[i], want[i])
			}
		}
	}
	check("first pass")
	if testredis.Real() {
		if err := r.ForEachServer(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		check("after SCRIPT FLUSH")
	}
}

// BenchmarkScopeSummaries reads the summaries of 5,000 scopes, against Counts' pass
// over the same state. cpu-ns/op is the process's CPU, the garbage collector's
// included; redis-cpu-ns/op Redis's (INFO cpu), on a real redis-server.
func BenchmarkScopeSummaries(b *testing.B) {
	r := testredis.New(b)
	store := redisstore.NewStore(r.Admin, r.Prefix)
	fillPools(b, store, r.Admin, 5000)
	ctx := context.Background()
	for name, pass := range map[string]func() (int, error){
		"summaries": func() (int, error) { s, err := store.ScopeSummaries(ctx); return len(s), err },
		"counts":    func() (int, error) { c, err := store.Counts(ctx); return len(c), err },
	} {
		b.Run(name, func(b *testing.B) {
			runtime.GC()
			cpu, rcpu := cputime.Now(b), redisCPU(b, r.Admin)
			for b.Loop() {
				if n, err := pass(); err != nil || n != 5000 {
					b.Fatalf("%d scopes, %v", n, err)
				}
			}
			cputime.Report(b, cpu)
			b.ReportMetric(float64((redisCPU(b, r.Admin)-rcpu).Nanoseconds())/float64(b.N), "redis-cpu-ns/op")
		})
	}
}

// redisCPU is used_cpu_sys + used_cpu_user of INFO cpu (0 on miniredis).
func redisCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	info, err := rdb.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var s float64
	for _, sec := range info {
		for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
			if v, err := strconv.ParseFloat(sec[f], 64); err == nil { // absent on miniredis
				s += v
			}
		}
	}
	return time.Duration(s * float64(time.Second))
}

// A pass shared in Redis reads back as it was stored; text of another layout (a
// replica of another release) or none reads as no pass.
func TestSharedSummaries(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	store := redisstore.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	if _, ok, err := store.SharedSummaries(ctx); ok || err != nil {
		t.Fatalf("none shared: ok %v, %v", ok, err)
	}
	fillPools(t, store, r.Client, 12)
	scopes, err := store.ScopeSummaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := redisstore.SummaryPass{At: time.UnixMilli(1_700_000_000_123), By: "replica one", Scopes: scopes}
	if err := store.ShareSummaries(ctx, p, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, ok, err := store.SharedSummaries(ctx)
	if err != nil || !ok || !got.At.Equal(p.At) || got.By != p.By || !slices.Equal(got.Scopes, p.Scopes) {
		t.Fatalf("read back %+v (%v, %v), want %+v", got, ok, err, p)
	}
	for _, text := range []string{"summaries/2 1 r\n", "summaries/1 x r\n", "summaries/1 1\n", "summaries/1 1 r\na b 1 2 3\n", "summaries/1 1 r\n x 1 2 3 4 5 6 7 8 9 10\n"} {
		if err := r.Client.Set(ctx, store.Keys().Summaries(), text, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := store.SharedSummaries(ctx); ok || err != nil {
			t.Errorf("%q: read as %+v (%v)", text, got, err)
		}
	}
}

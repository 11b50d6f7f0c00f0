package lua_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/lua"
)

// fillPools publishes n scopes and writes pool state into scope i's keys directly:
// i%3 pods (the first of an old deploy_ver when i%3 == 2), the last one idle, i%4
// sessions, i%2 deploys in flight with as many followers, i%5 waiters.
func fillPools(tb testing.TB, store *lua.Store, rdb redis.UniversalClient, n int) {
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
		if err := store.ScopePublish(ctx, lua.ScopeRecord{ScopeID: scope, Config: cfg, Version: int64(1 + i%7), DeployVer: ver}); err != nil {
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
	store := lua.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	fillPools(t, store, r.Client, 30)
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
	if len(want) != 29 {
		t.Fatalf("Counts: %d scopes, want 29", len(want))
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
				t.Errorf("%s: summary %+v, want %+v and pod_concurrency 3", when, got[i], want[i])
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
	store := lua.NewStore(r.Admin, r.Prefix)
	fillPools(b, store, r.Admin, 5000)
	ctx := context.Background()
	for name, pass := range map[string]func() (int, error){
		"summaries": func() (int, error) { s, err := store.ScopeSummaries(ctx); return len(s), err },
		"counts":    func() (int, error) { c, err := store.Counts(ctx); return len(c), err },
	} {
		b.Run(name, func(b *testing.B) {
			runtime.GC()
			cpu, rcpu := cpuNow(b), redisCPU(b, r.Admin)
			for b.Loop() {
				if n, err := pass(); err != nil || n != 5000 {
					b.Fatalf("%d scopes, %v", n, err)
				}
			}
			b.ReportMetric(float64((cpuNow(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64((redisCPU(b, r.Admin)-rcpu).Nanoseconds())/float64(b.N), "redis-cpu-ns/op")
		})
	}
}

func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
			var v float64
			fmt.Sscan(sec[f], &v)
			s += v
		}
	}
	return time.Duration(s * float64(time.Second))
}

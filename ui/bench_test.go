package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/cputime"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/tenants"
	"github.com/warmpool/warmpool/ui"
)

// BenchmarkState answers the page's request with the details of its 20 rows at 5,000
// scopes of two pods, each answer after a new pass (the clock moves a Refresh between
// answers, as one open page's does). cpu-ns/op is the process's CPU, the garbage
// collector's included.
func BenchmarkState(b *testing.B) {
	r := testredis.New(b)
	store := redisstore.NewStore(r.Admin, r.Prefix)
	ctx := context.Background()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 4, 2
	if err := cfg.Normalize(); err != nil {
		b.Fatal(err)
	}
	ver := cfg.Deploy.DeployVer()
	pipe := r.Admin.Pipeline()
	var detail []string
	for i := range 5000 {
		scope := fmt.Sprintf("scope-%04d", i)
		if err := store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: scope, Config: cfg, Version: 1, DeployVer: ver}); err != nil {
			b.Fatal(err)
		}
		if i < ui.DefaultLimit {
			detail = append(detail, scope)
		}
		k := store.Keys().Scope(scope)
		for p := range 2 {
			pod := fmt.Sprintf("%s-%d", scope, p)
			pipe.ZAdd(ctx, k.Pods, redis.Z{Score: float64(p), Member: pod})
			pipe.HSet(ctx, k.PodVer, pod, ver)
			pipe.HSet(ctx, k.Slots, pod, 1)
			pipe.HSet(ctx, k.PodInfo, pod, fmt.Sprintf(`{"pod_id":%q,"scope_id":%q,"deploy_ver":%q,"sse_url":"http://x"}`, pod, scope, ver))
			pipe.HSet(ctx, k.Sessions, fmt.Sprint("s", p), pod)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	configs, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = configs.Close() })
	clock := testredis.NewClock()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	u := ui.New(store, tenants.New(configs, store, log), "r1", clock, log)
	q := ui.Query{Sort: "scope_id", Limit: ui.DefaultLimit, Detail: detail}
	runtime.GC()
	cpu := cputime.Now(b)
	for b.Loop() {
		clock.Advance(ui.Refresh)
		st, err := u.State(ctx, q)
		if err != nil || st.Totals.Scopes != 5000 || len(st.Scopes) != ui.DefaultLimit {
			b.Fatalf("%d scopes, %d details: %v", st.Totals.Scopes, len(st.Scopes), err)
		}
	}
	cputime.Report(b, cpu)
}

package sm_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/sm"
)

// BenchmarkRouteWarm measures routing a new session onto a warm pod with a free slot,
// the gateway's hot path, and reports its Redis round trips (the target is one). Each
// iteration ends the session again.
func BenchmarkRouteWarm(b *testing.B) {
	r := testredis.New(b)
	store := lua.NewStore(r.Client, r.Prefix)
	ctx := context.Background()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 64, 64
	if err := cfg.Normalize(); err != nil {
		b.Fatal(err)
	}
	if err := store.ScopePublish(ctx, lua.ScopeRecord{ScopeID: "bench", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		b.Fatal(err)
	}
	if _, err := store.Bootstrap(ctx, "e"); err != nil {
		b.Fatal(err)
	}
	fake := fakepod.New()
	defer fake.Close()
	pool := rm.New(store, fake, rm.Config{})
	defer pool.Close()
	m := sm.New(store, pool, sm.Config{})
	defer m.Close()
	if _, err := m.Route(ctx, "bench", "warmup", ""); err != nil {
		b.Fatal(err)
	}
	counter := &testredis.Counter{}
	r.Client.AddHook(counter)
	var trips int64
	i := 0
	for b.Loop() {
		id := "s" + strconv.Itoa(i)
		i++
		before := counter.Count()
		bd, err := m.Route(ctx, "bench", id, "")
		trips += counter.Count() - before
		if err != nil || !bd.New {
			b.Fatalf("route = %+v, %v", bd, err)
		}
		if _, err := m.End(ctx, "bench", id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/route")
}

package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// BenchmarkQuotaRoute measures what a tenant's quota costs a route that binds a new
// session (then ends it): on a scope whose tenant has no quotas, on one governed by
// max_sessions (the allowance the last session left is taken again: no grant), and on
// one whose allowance a balance pass trims after every session (each route asks the
// escrow: the worst case). It reports Redis round trips per route.
func BenchmarkQuotaRoute(b *testing.B) {
	for _, c := range []struct {
		name            string
		governed, trims bool
	}{{"ungoverned", false, false}, {"governed", true, false}, {"grant_each", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			r := testredis.New(b)
			st := redisstore.NewStore(r.Client, r.Prefix)
			ctx := context.Background()
			now := time.UnixMilli(1_700_000_000_000)
			cfg := warmpool.DefaultScopeConfig()
			cfg.Tenant, cfg.Pool.PodConcurrency, cfg.Pool.MaxConcurrency = "acme", 4, 4
			if err := cfg.Normalize(); err != nil {
				b.Fatal(err)
			}
			if err := st.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: "s", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
				b.Fatal(err)
			}
			if _, err := st.Bootstrap(ctx, "epoch-1"); err != nil {
				b.Fatal(err)
			}
			l := warmpool.Unlimited()
			if c.governed {
				l.Sessions = 1000
				if err := st.PublishTenant(ctx, "acme", l); err != nil {
					b.Fatal(err)
				}
				if err := st.BalanceTenant(ctx, "acme", l); err != nil {
					b.Fatal(err)
				}
			}
			res, err := st.PodAcquire(ctx, "s", redisstore.AcquireArgs{Now: now, Claim: "c", ClaimDeadline: now.Add(time.Minute), LeaseDeadline: now.Add(time.Minute), RoomMargin: time.Second})
			if err != nil || res.Kind != redisstore.AcquireDeploy {
				b.Fatalf("%+v, %v", res, err)
			}
			pod := warmpool.Pod{ID: warmpool.PodName("s", res.Fence), ScopeID: "s", DeployVer: res.Spec.DeployVer(), Fence: res.Fence, SSEURL: "http://x/sse"}
			if _, err := st.PodRegister(ctx, "s", res.Deploy, pod, "", now, now.Add(time.Minute)); err != nil {
				b.Fatal(err)
			}
			counter := &testredis.Counter{}
			r.Client.AddHook(counter)
			var trips int64
			i := 0
			for b.Loop() {
				i++
				sid := "u" + strconv.Itoa(i)
				before := counter.Count()
				got, err := st.SessionRoute(ctx, "s", redisstore.RouteArgs{Now: now, Session: sid})
				trips += counter.Count() - before
				if err != nil || !got.Served() {
					b.Fatalf("route: %+v, %v", got, err)
				}
				b.StopTimer()
				if _, err := st.SessionEnd(ctx, "s", sid, now); err != nil {
					b.Fatal(err)
				}
				if c.trims {
					if err := st.BalanceTenant(ctx, "acme", l); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(trips)/float64(b.N), "trips/route")
		})
	}
}

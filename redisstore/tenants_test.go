package redisstore_test

import (
	"context"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// A tenant's limits go in and out of its one key; its use is the sum over the scopes
// whose published config names it: their pods and deploys in flight, the requests of
// those pods, their sessions and idle pods. A scope that changes tenant leaves the
// old tenant's sum (and index) and joins the new one's.
func TestTenantUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *warmpool.ScopeConfig) {
		c.Tenant, c.Deploy.Resources = "acme", warmpool.Resources{CPU: "500m", Memory: "512Mi"}
	})
	lead := e.acquire("c1")
	if _, _, err := e.register(lead, "c1"); err != nil {
		t.Fatal(err)
	}
	if second := e.acquire("c2"); second.Fence == lead.Fence {
		t.Fatalf("the second acquire did not lead a deploy: %+v", second)
	}
	e.scope = "s2"
	e.publish(func(c *warmpool.ScopeConfig) { c.Tenant = "acme" })
	e.scope = "s3"
	e.publish(func(c *warmpool.ScopeConfig) { c.Tenant = "other" })
	e.acquire("c3")

	use := func(tenant string) warmpool.TenantUse {
		t.Helper()
		u, err := e.store.TenantUse(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	want := warmpool.TenantUse{Pods: 2, MilliCPU: 1000, MemoryBytes: 1 << 30, Scopes: 2}
	if got := use("acme"); got != want {
		t.Fatalf("acme uses %+v, want %+v (s1: a pod and a deploy of 500m, 512Mi; s2: nothing)", got, want)
	}
	if got := use("other"); got.Pods != 1 || got.Scopes != 1 {
		t.Fatalf("other uses %+v, want s3's deploy", got)
	}
	if got := use("nobody"); got != (warmpool.TenantUse{}) {
		t.Fatalf("a tenant no scope names uses %+v", got)
	}

	e.scope = "s1"
	e.publish(func(c *warmpool.ScopeConfig) { c.Tenant = "other" })
	if got := use("acme"); got != (warmpool.TenantUse{Scopes: 1}) {
		t.Fatalf("after s1 moved to other, acme uses %+v, want s2 alone", got)
	}
	if in, err := e.r.Client.SIsMember(ctx, e.store.Keys().TenantScopes("acme"), "s1").Result(); err != nil || in {
		t.Fatalf("s1 in acme's index after it moved: %v, %v", in, err)
	}
	if got := use("other"); got.Pods != 3 || got.Scopes != 2 || got.MilliCPU != 1500 {
		t.Fatalf("other uses %+v, want s1's two pods of the default 500m and s3's deploy", got)
	}

	if _, ok, err := e.store.TenantLimits(ctx, "acme"); err != nil || ok {
		t.Fatalf("limits of a tenant never published: ok %v, %v", ok, err)
	}
	l := warmpool.TenantLimits{Pods: 10, MilliCPU: 4000, MemoryBytes: 8 << 30, Sessions: warmpool.NoLimit, IdlePods: 0, Weight: 3}
	if err := e.store.PublishTenant(ctx, "acme", l); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := e.store.TenantLimits(ctx, "acme"); err != nil || !ok || got != l {
		t.Fatalf("limits read back %+v, %v, %v; want %+v", got, ok, err, l)
	}
	if err := e.store.ForgetTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := e.store.TenantLimits(ctx, "acme"); err != nil || ok || got != warmpool.Unlimited() {
		t.Fatalf("limits after forget %+v, %v, %v; want none", got, ok, err)
	}
	if ks := e.store.Keys(); testredis.Slot(ks.Tenant("acme")) != testredis.Slot(ks.TenantScopes("acme")) {
		t.Fatalf("a tenant's keys are in two slots")
	}
}

package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// TestDeployEstimate: the register script learns the scope's deploy time from each
// deploy's start (a rolling average), DeployETA answers the time left of the soonest
// deploy in flight, and a failed deploy neither teaches the estimate nor leaves its
// start behind.
func TestDeployEstimate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency, c.Pool.PodConcurrency = 3, 1 }) // max_pods 3
	ctx := context.Background()
	eta := func() (time.Duration, bool) {
		t.Helper()
		d, ok, err := e.store.DeployETA(ctx, e.scope, e.now)
		if err != nil {
			t.Fatal(err)
		}
		return d, ok
	}

	first := e.acquire("c1")
	if first.Kind != redisstore.AcquireDeploy {
		t.Fatalf("first acquire: %+v", first)
	}
	if _, ok := eta(); ok {
		t.Fatal("an estimate before any deploy finished")
	}
	e.now = e.now.Add(3 * time.Second)
	if _, _, err := e.register(first, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := eta(); ok {
		t.Fatal("an estimate with no deploy in flight")
	}

	second := e.acquire("c2")
	e.now = e.now.Add(500 * time.Millisecond)
	if d, ok := eta(); !ok || d != 2500*time.Millisecond {
		t.Fatalf("ETA 500ms into a deploy with a 3s estimate: %v %v, want 2.5s", d, ok)
	}
	e.now = e.now.Add(500 * time.Millisecond)
	if _, _, err := e.register(second, "c2"); err != nil { // took 1s: 3000 + 0.3 * (1000 - 3000)
		t.Fatal(err)
	}
	third := e.acquire("c3")
	if d, ok := eta(); !ok || d != 2400*time.Millisecond {
		t.Fatalf("ETA at the start of a deploy after 3s and 1s ones: %v %v, want 2.4s", d, ok)
	}
	e.now = e.now.Add(5 * time.Second)
	if d, ok := eta(); !ok || d != 0 {
		t.Fatalf("ETA of an overdue deploy: %v %v, want 0", d, ok)
	}

	if _, err := e.store.DeployAbort(ctx, e.scope, third.Deploy, third.Spec.DeployVer(), "failed", false, e.now, e.now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := eta(); ok {
		t.Fatal("the aborted deploy still counts as in flight")
	}
	k := e.store.Keys().Scope(e.scope)
	stats, err := e.r.Client.HGetAll(ctx, k.DeployStats).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats["est"] != "2400" {
		t.Fatalf("deploy stats %v, want only the estimate 2400", stats)
	}
}

// TestDeployStartPruned: the start of a deploy whose lease expired (its leader died)
// goes when the next deploy starts, so the hash stays as small as the deploys in flight.
func TestDeployStartPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MaxConcurrency, c.Pool.PodConcurrency = 2, 1 })
	ctx := context.Background()
	if res := e.acquire("c1"); res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire: %+v", res)
	}
	e.now = e.now.Add(time.Minute) // past the lease: the next acquire expires it
	if res := e.acquire("c2"); res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire after the lease expired: %+v", res)
	}
	stats, err := e.r.Client.HGetAll(ctx, e.store.Keys().Scope(e.scope).DeployStats).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 {
		t.Fatalf("deploy stats %v, want the start of the live deploy alone", stats)
	}
}

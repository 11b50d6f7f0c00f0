package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// fail aborts a deploy as failed, at the env's now.
func (e *env) fail(res redisstore.AcquireResult, reason string) {
	e.t.Helper()
	if _, err := e.store.DeployAbort(context.Background(), e.scope, res.Deploy, res.Spec.DeployVer(), reason, false, e.now, e.now.Add(time.Minute)); err != nil {
		e.t.Fatal(err)
	}
}

// wantBackoff checks the scope's backoff as both snapshots read it.
func (e *env) wantBackoff(failures int, until time.Time, reason string) {
	e.t.Helper()
	want := redisstore.Backoff{}
	if failures > 0 {
		want = redisstore.Backoff{Failures: failures, Until: until, LastError: reason}
	}
	for _, got := range []redisstore.Backoff{e.snap().Backoff, e.poolSnap().Backoff} {
		if got.Failures != want.Failures || !got.Until.Equal(want.Until) || got.LastError != want.LastError {
			e.t.Fatalf("backoff = %+v, want %+v", got, want)
		}
	}
}

// SPEC §11.3: failed deploys of the current deploy_ver back off 5 s × 2^(failures−1);
// before the end no deploy starts (acquire, refill), from then on one at a time; warm
// pods and rooms are taken as ever; a registered pod or a new deploy_ver resets it.
func TestRefillBackoff(t *testing.T) {
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 1 }) // max_pods 2, pc 2
	ctx := context.Background()
	t0 := e.now
	lead := e.acquire("c1")
	if lead.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire = %+v, want a deploy", lead)
	}
	e.fail(lead, "image pull failed")
	e.wantBackoff(1, t0.Add(5*time.Second), "image pull failed")

	e.now = t0.Add(time.Second)
	r := e.acquire("c2")
	if r.Kind != redisstore.AcquireBackoff || r.Backoff.Failures != 1 || !r.Backoff.Until.Equal(t0.Add(5*time.Second)) ||
		r.Backoff.LastError != "image pull failed" || r.Deploys != 0 {
		t.Fatalf("acquire during the backoff = %+v, want backoff 1 until +5s", r)
	}
	if p, err := e.store.PodPlaceholder(ctx, e.scope, e.now, e.now.Add(30*time.Second), e.now.Add(30*time.Second)); err != nil || p.Kind != redisstore.PlaceholderBackoff {
		t.Fatalf("refill during the backoff = %+v, %v; want backoff", p, err)
	}
	if at, ok, err := e.store.ScopeDue(ctx, e.scope, e.now); err != nil || !ok || !at.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("due = %v %v %v, want the end of the backoff", at, ok, err)
	}

	// The end: one deploy tries again; a second caller follows it, a third is held back.
	e.now = t0.Add(5 * time.Second)
	probe := e.acquire("c3")
	if probe.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire at the end of the backoff = %+v, want a deploy", probe)
	}
	if f := e.acquire("c4"); f.Kind != redisstore.AcquireFollower {
		t.Fatalf("second acquire = %+v, want a follower of the deploy that tries again", f)
	}
	if r := e.acquire("c5"); r.Kind != redisstore.AcquireBackoff || r.Deploys != 1 {
		t.Fatalf("third acquire = %+v, want backoff with that deploy in flight", r)
	}
	e.now = t0.Add(6 * time.Second)
	e.fail(probe, "crash loop")
	e.wantBackoff(2, t0.Add(16*time.Second), "crash loop")

	e.now = t0.Add(16 * time.Second)
	third := e.acquire("c6")
	e.fail(third, "crash loop")
	e.wantBackoff(3, t0.Add(36*time.Second), "crash loop")

	// A warm pod is used during a backoff: a pod that registers resets it; the next
	// failure starts from 5 s; the pod, idle again, is still handed out.
	e.now = t0.Add(36 * time.Second)
	ok := e.acquire("c7")
	if _, _, err := e.register(ok, "c7"); err != nil {
		t.Fatal(err)
	}
	e.wantBackoff(0, time.Time{}, "")
	failed := e.acquire("c8")
	e.fail(failed, "image pull failed")
	e.wantBackoff(1, e.now.Add(5*time.Second), "image pull failed")
	if _, _, err := e.store.ClaimRelease(ctx, e.scope, "c7", e.now); err != nil {
		t.Fatal(err)
	}
	if r := e.acquire("c9"); r.Kind != redisstore.AcquireWarm {
		t.Fatalf("acquire with a warm pod during the backoff = %+v, want it", r)
	}

	// A class B change keeps the backoff; a class A change ends it, and a late failure
	// of the old deploy_ver does not count.
	until := e.now.Add(5 * time.Second)
	e.now = until
	old := e.acquire("c10")
	if old.Kind != redisstore.AcquireDeploy {
		t.Fatalf("acquire at the end of the backoff = %+v, want a deploy", old)
	}
	e.publish(func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 0 })
	e.wantBackoff(1, until, "image pull failed")
	e.publish(func(c *warmpool.ScopeConfig) { c.Deploy.Image = "agent:2" })
	e.wantBackoff(0, time.Time{}, "")
	e.fail(old, "image pull failed")
	e.wantBackoff(0, time.Time{}, "")
}

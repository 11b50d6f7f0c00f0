package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// routeFixed routes a session at the env's now with a fixed TTL.
func (e *env) routeFixed(sid string, ttl time.Duration) redisstore.RouteResult {
	e.t.Helper()
	res, err := e.store.SessionRoute(context.Background(), e.scope, redisstore.RouteArgs{Now: e.now, Session: sid, FixedTTL: ttl})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// A session bound with a fixed TTL (E2B's timeout) expires that TTL after it was
// bound, whatever its activity: a route, a touch and an agent report leave its expiry
// where it is, as they refresh a session of session_ttl_s. session_deadline.lua sets
// it (later or earlier), or with later only moves it later; the expiry sweep ends it.
func TestFixedExpiryIsNotMovedByActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *warmpool.ScopeConfig) {
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.SessionTTLS = 2, 2, 600
	})
	pod := e.onePod()
	bound := e.now
	if r := e.routeFixed("e2b", 30*time.Second); r.Kind != redisstore.RouteNew || r.Pod.ID != pod.ID {
		t.Fatalf("fixed route: %+v", r)
	}
	e.route("plain")
	expiry := func(sid string) time.Time { return e.snap().SessExp[sid] }
	if got := e.snap().Fixed; !slices.Equal(got, []string{"e2b"}) {
		t.Fatalf("fixed sessions %v, want [e2b]", got)
	}
	e.now = e.now.Add(10 * time.Second)
	if r := e.routeFixed("e2b", time.Hour); r.Kind != redisstore.RouteBound {
		t.Fatalf("route of the bound session: %+v", r)
	}
	e.route("e2b")
	e.route("plain")
	if state, err := e.store.SessionTouch(ctx, e.scope, "e2b", e.now); err != nil || state != redisstore.TouchTouched {
		t.Fatalf("touch: %q %v", state, err)
	}
	if _, err := e.report(pod.ID, false, "e2b", "plain"); err != nil {
		t.Fatal(err)
	}
	if got, want := expiry("e2b"), bound.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("e2b expires %v after a route, a touch and a report; want %v, its fixed expiry", got, want)
	}
	if got, want := expiry("plain"), e.now.Add(600*time.Second); !got.Equal(want) {
		t.Fatalf("plain expires %v, want %v: refreshed", got, want)
	}

	deadline := func(sid string, ttl time.Duration, later bool) redisstore.DeadlineResult {
		t.Helper()
		res, err := e.store.SessionDeadline(ctx, e.scope, sid, e.now, ttl, later)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := deadline("e2b", 5*time.Second, false); res.State != redisstore.DeadlineSet || !res.Expiry.Equal(e.now.Add(5*time.Second)) {
		t.Fatalf("set 5 s: %+v, want set at now + 5 s (earlier than before)", res)
	}
	if res := deadline("e2b", time.Second, true); !res.Expiry.Equal(e.now.Add(5 * time.Second)) {
		t.Fatalf("later 1 s: %+v, want the expiry kept (it is later)", res)
	}
	if res := deadline("e2b", 20*time.Second, true); !res.Expiry.Equal(e.now.Add(20*time.Second)) || !expiry("e2b").Equal(res.Expiry) {
		t.Fatalf("later 20 s: %+v, want now + 20 s", res)
	}
	if res := deadline("plain", time.Minute, false); res.State != redisstore.DeadlineSet {
		t.Fatalf("fixing plain: %+v", res)
	}
	if got := e.snap().Fixed; !slices.Equal(got, []string{"e2b", "plain"}) {
		t.Fatalf("fixed sessions %v, want [e2b plain]", got)
	}
	if res := deadline("nobody", time.Minute, false); res.State != redisstore.DeadlineUnknown {
		t.Fatalf("unknown session: %+v", res)
	}

	// Ended by its deadline: evicted by the sweep, no longer fixed; a session of the
	// same id bound later without a fixed TTL is an ordinary one.
	e.now = e.now.Add(21 * time.Second)
	if res := deadline("e2b", time.Hour, true); res.State != redisstore.DeadlineExpired {
		t.Fatalf("deadline of an expired session: %+v, want expired", res)
	}
	if _, ok := e.snap().Sessions["e2b"]; ok {
		t.Fatal("e2b still bound after its deadline")
	}
	if ok, err := e.store.SessionEnd(ctx, e.scope, "plain", e.now); err != nil || !ok {
		t.Fatalf("end plain: %v %v", ok, err)
	}
	if got := e.snap().Fixed; len(got) != 0 {
		t.Fatalf("fixed sessions %v after both ended, want none", got)
	}
	e.route("e2b")
	e.now = e.now.Add(time.Second)
	e.route("e2b")
	if got, want := expiry("e2b"), e.now.Add(600*time.Second); !got.Equal(want) {
		t.Fatalf("e2b bound again expires %v, want %v: refreshed as any", got, want)
	}
}

// The sessions of a purged pod are no longer fixed, nor are those the expiry sweep ends.
func TestFixedSessionsGoWithTheirPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *warmpool.ScopeConfig) { c.Pool.PodConcurrency, c.Pool.MaxConcurrency = 2, 2 })
	pod := e.onePod()
	e.routeFixed("a", time.Minute)
	e.routeFixed("b", time.Second)
	e.now = e.now.Add(2 * time.Second)
	if n, _, err := e.store.SessionEvict(ctx, e.scope, e.now, 10); err != nil || n != 1 {
		t.Fatalf("evict: %d %v, want b evicted", n, err)
	}
	if got := e.snap().Fixed; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("fixed sessions %v after b expired, want [a]", got)
	}
	if _, err := e.store.PodPurge(ctx, e.scope, pod.ID, "dead", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.snap().Fixed; len(got) != 0 {
		t.Fatalf("fixed sessions %v after the pod was purged, want none", got)
	}
}

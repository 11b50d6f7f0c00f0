package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// routeConf routes a session at the env's now with a (sealed) session_config.
func (e *env) routeConf(sid, conf string) redisstore.RouteResult {
	e.t.Helper()
	res, err := e.store.SessionRoute(context.Background(), e.scope, redisstore.RouteArgs{Now: e.now, Session: sid, Config: []byte(conf)})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// confFields are the fields of the scope's sconf HASH, sorted.
func (e *env) confFields() []string {
	e.t.Helper()
	f, err := e.r.Client.HKeys(context.Background(), e.store.Keys().Scope(e.scope).SessConf).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(f)
	return f
}

// readConf is what session_config.lua answers pod's agent for id: the config, or
// "unknown".
func (e *env) readConf(id, pod string) string {
	e.t.Helper()
	c, err := e.store.SessionConfig(context.Background(), e.scope, id, pod, e.now)
	if err == redisstore.ErrNoSession {
		return "unknown"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if c.Pod.ID != pod {
		e.t.Fatalf("config of %s read with pod %q, want %q", id, c.Pod.ID, pod)
	}
	return string(c.Sealed)
}

// A session's config is kept when the route binds it, read only by its own pod while
// it lives, not replaced by a later route of the bound session, and dropped by every
// way the session ends: end, expiry, a route that finds it expired, its pod's purge.
func TestSessionConfigLivesWithItsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *warmpool.ScopeConfig) {
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.SessionTTLS = 4, 4, 60
	})
	pod := e.onePod()
	if r := e.routeConf("a", "conf-a"); r.Kind != redisstore.RouteNew || r.Pod.ID != pod.ID {
		t.Fatalf("route a: %+v", r)
	}
	e.routeConf("b", "conf-b")
	e.route("plain")
	if r := e.routeConf("a", "other"); r.Kind != redisstore.RouteBound {
		t.Fatalf("route of bound a: %+v", r)
	}
	for _, c := range []struct{ id, pod, want string }{
		{"a", pod.ID, "conf-a"}, {"b", pod.ID, "conf-b"}, {"plain", pod.ID, ""},
		{"a", "another-pod", "unknown"}, {"nobody", pod.ID, "unknown"},
	} {
		if got := e.readConf(c.id, c.pod); got != c.want {
			t.Errorf("config of %s read by %s: %q, want %q", c.id, c.pod, got, c.want)
		}
	}

	if ok, err := e.store.SessionEnd(ctx, e.scope, "a", e.now); err != nil || !ok {
		t.Fatalf("end a: %v %v", ok, err)
	}
	if got := e.readConf("a", pod.ID); got != "unknown" {
		t.Fatalf("config of ended a: %q, want unknown", got)
	}
	if got := e.confFields(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("configs kept %v after a ended, want [b]", got)
	}
	// a bound again without one has none: nothing of its last life is left
	e.route("a")
	if got := e.readConf("a", pod.ID); got != "" {
		t.Fatalf("config of a bound again without one: %q, want none", got)
	}

	e.now = e.now.Add(61 * time.Second)
	if got := e.readConf("b", pod.ID); got != "unknown" {
		t.Fatalf("config of expired b: %q, want unknown", got)
	}
	if n, _, err := e.store.SessionEvict(ctx, e.scope, e.now, 10); err != nil || n != 3 {
		t.Fatalf("evict: %d %v, want a, b and plain expired", n, err)
	}
	if got := e.confFields(); len(got) != 0 {
		t.Fatalf("configs kept %v after every session expired, want none", got)
	}

	e.routeConf("c", "conf-c")
	e.now = e.now.Add(61 * time.Second)
	e.routeConf("c", "conf-c2") // finds c expired: evicts it, binds it anew
	if got := e.readConf("c", pod.ID); got != "conf-c2" {
		t.Fatalf("config of c bound anew: %q, want conf-c2", got)
	}
	if _, err := e.store.PodPurge(ctx, e.scope, pod.ID, "dead", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.confFields(); len(got) != 0 {
		t.Fatalf("configs kept %v after the pod was purged, want none", got)
	}
}

// A hold's config is kept by the acquire's hold_touch.lua under the hold's id, read by
// the hold's pod alone, kept by a touch without one, and dropped when the hold is
// released, expires, becomes a session's slot, or its pod is purged.
func TestHoldConfigLivesWithItsHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *warmpool.ScopeConfig) {
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.HoldTTLS = 4, 4, 30
	})
	pod := e.onePod()
	take := func(hold, conf string) {
		t.Helper()
		if r := e.acquire(hold); r.Pod.ID != pod.ID {
			t.Fatalf("acquire %s: %+v", hold, r)
		}
		if _, err := e.store.HoldTouch(ctx, e.scope, hold, pod.ID, e.now, []byte(conf)); err != nil {
			t.Fatal(err)
		}
	}
	take("h1", "conf-1")
	if _, err := e.store.HoldTouch(ctx, e.scope, "h1", pod.ID, e.now, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.readConf("h1", pod.ID); got != "conf-1" {
		t.Fatalf("config of h1 after a touch: %q, want conf-1", got)
	}
	if got := e.readConf("h1", "another-pod"); got != "unknown" {
		t.Fatalf("config of h1 read by another pod: %q, want unknown", got)
	}
	if _, err := e.store.HoldRelease(ctx, e.scope, "h1", pod.ID, e.now); err != nil {
		t.Fatal(err)
	}
	if got := e.confFields(); len(got) != 0 {
		t.Fatalf("configs %v after h1 was released, want none", got)
	}
	take("h2", "conf-2")
	e.now = e.now.Add(31 * time.Second)
	if got := e.readConf("h2", pod.ID); got != "unknown" {
		t.Fatalf("config of expired h2: %q, want unknown", got)
	}
	take("h3", "conf-3") // the acquire drops the expired h2 first
	if got := e.confFields(); !slices.Equal(got, []string{"hold|h3"}) {
		t.Fatalf("configs %v after h2 expired, want [hold|h3]", got)
	}
	// A session routed on the hold takes its slot over: the hold goes, its config too.
	if r, err := e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: "s1", Claim: "h3", Config: []byte("conf-s1")}); err != nil || r.Pod.ID != pod.ID {
		t.Fatalf("route s1 on the hold h3: %+v, %v", r, err)
	}
	if got := e.confFields(); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("configs %v after s1 took h3's slot, want [s1]", got)
	}
	if _, err := e.store.PodPurge(ctx, e.scope, pod.ID, "dead", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.confFields(); len(got) != 0 {
		t.Fatalf("configs %v after the pod was purged, want none", got)
	}
}

package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
)

// pausedCalls are sent while Redis is paused; each changes state when it runs.
var pausedCalls = []call{
	{http.MethodPost, "/v1/scopes/p/sessions", `{"session_id":"late"}`},
	{http.MethodPost, "/v1/scopes/p/sessions", `{"session_id":"late-r","request_id":"r1"}`},
	{http.MethodDelete, "/v1/scopes/p/sessions/s1", ""},
	{http.MethodPost, "/v1/scopes/p/pods/acquire", `{}`},
	{http.MethodPut, "/v1/scopes/p/config", scopeCfg(6, 2, 4, 10)},
}

// warmConnections makes the replica's Redis client open n connections (read calls
// run side by side) and keep them in its pool, as a replica under load has them.
func warmConnections(t *testing.T, e *env, rs *testredis.Server, n int) {
	t.Helper()
	for range 20 {
		if rs.Clients(t) > n {
			return
		}
		var wg sync.WaitGroup
		for range 2 * n {
			wg.Go(func() { e.do(http.MethodGet, "/v1/scopes/p/pool", nil) })
		}
		wg.Wait()
	}
	t.Fatalf("the replica keeps %d connections to Redis, want more than %d", rs.Clients(t), n)
}

// Issue 12.5: nothing is done after an error was answered. A redis-server of the
// test's own is paused (SIGSTOP) while a route, a route with a request id, a session
// end, an acquire and a config PUT are in flight; each is answered 503
// STORE_UNAVAILABLE by the replica's production client (1s read timeout, one retry).
// When Redis resumes it runs the calls still queued in its sockets: each must refuse
// (its caller's deadline has passed), so nothing is bound, ended or reserved, and the
// config stored before the publish failed is published by the next reconcile. Before,
// the paused route was bound and kept its slot, the ended session was gone, the
// acquire left a placeholder with no leader for its 30s lease, and reconcile never
// published the stored v2.
func TestNothingDoneAfterAnError(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a redis-server of its own for seconds; skipped with -short")
	}
	ctx := context.Background()
	rs := testredis.StartServer(t)
	e := mustEnv(t, withRedisURL(rs.URL(), "wp:pause:"))
	e.putScope("p", scopeCfg(4, 2, 4, 10)) // max_pods 2
	first := e.route("p", "s1")            // one pod, one of its two slots free
	e.route("p", "s0")                     // and every script the calls below run is loaded
	e.ok(http.MethodDelete, "/v1/scopes/p/sessions/s0", nil)
	store := e.srv.Store()
	// The calls below must be sent while Redis is paused, on connections open before:
	// a new connection would wait for Redis's answer to its handshake and send nothing.
	warmConnections(t, e, rs, 2*len(pausedCalls))

	rs.Pause(t)
	calls := pausedCalls
	answers := make([]resp, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { answers[i] = e.do(c.method, c.path, c.body) })
	}
	wg.Wait()
	rs.Resume(t)
	for _, r := range answers {
		e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeStoreUnavailable)
		t.Logf("%s %s answered 503 after %s", r.method, r.path, r.took.Round(time.Millisecond))
	}

	s, err := store.Snapshot(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Sessions) != 1 || s.Sessions["s1"] != first["pod_id"] {
		t.Errorf("sessions after the pause: %v; want only s1 on %v (nothing bound, nothing ended)", s.Sessions, first["pod_id"])
	}
	if len(s.Deploys) != 0 || len(s.Claims) != 0 || len(s.Followers) != 0 || len(s.Waiters) != 0 {
		t.Errorf("left after the pause: deploys %v claims %v followers %v waiters %v; want none", s.Deploys, s.Claims, s.Followers, s.Waiters)
	}
	if len(s.Pods) != 1 || s.Pods[0].Slots != 1 {
		t.Errorf("pods after the pause: %+v; want one pod with s1's slot alone", s.Pods)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/p/sessions/late", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)

	// The PUT was stored as v2 before its publish failed; reconcile publishes it.
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/p/config", nil), "version"); v != 2 {
		t.Fatalf("stored version %d, want 2", v)
	}
	if rec, err := store.Scope(ctx, "p"); err != nil || rec.Version != 1 {
		t.Fatalf("published before reconcile: v%d, %v; want v1", rec.Version, err)
	}
	if !e.srv.Runner.RunOnce(ctx, e.srv.Sweeper.ReconcileJob()) {
		t.Fatal("reconcile did not run")
	}
	if rec, err := store.Scope(ctx, "p"); err != nil || rec.Version != 2 || rec.Config.Pool.MaxConcurrency != 6 {
		t.Fatalf("published after reconcile: v%d (%+v), %v; want v2", rec.Version, rec.Config.Pool, err)
	}
	// The refused route works now, on the pod's free slot.
	if b := e.route("p", "late"); b["pod_id"] != first["pod_id"] || b["new"] != true {
		t.Fatalf("route after the pause: %v", b)
	}
}

// withFakeStateDir makes a replica build the fake driver itself, keeping its pods in
// dir, as `warmpool serve --driver fake --fake-state-dir DIR` does.
func withFakeStateDir(dir string) envOption {
	return func(c *server.Config) { c.Driver, c.DriverName, c.FakeStateDir = nil, "fake", dir }
}

// Issue 12.7: two replicas on the fake driver keep each other's pods. Each used to
// have its pods in its own memory, so the other's watch and reconcile took them for
// pods gone from the driver and purged them (with their sessions) once the ghost grace
// (30s) had passed. With one --fake-state-dir they see the same pods.
func TestFakeReplicasKeepEachOthersPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	rs := newReplicas(t, withFakeStateDir(dir))
	rs.a.putScope("f", scopeCfg(4, 2, 0, 1))
	pod := rs.a.route("f", "s1")["pod_id"] // deployed by a's driver
	rs.clock.Advance(2 * time.Minute)      // past the ghost and orphan graces
	for _, job := range []string{sweeper.WatchJobName(lua.DueShard("f")), "reconcile"} {
		if !rs.b.srv.Runner.RunOnce(ctx, jobNamed(t, rs.b.srv, job)) {
			t.Fatalf("%s did not run on b", job)
		}
	}
	pods := podsOf(rs.b.pool("f"))
	if len(pods) != 1 || pods[pod.(string)] == nil || num(t, pods[pod.(string)], "sessions") != 1 {
		t.Fatalf("after b's sweep the pool is %v; want a's pod %v with s1", pods, pod)
	}
	if again := rs.b.route("f", "s1"); again["pod_id"] != pod || again["new"] != false {
		t.Fatalf("s1 through b after b's sweep: %v, want still on %v", again, pod)
	}
	if _, err := os.Stat(filepath.Join(dir, pod.(string)+".json")); err != nil {
		t.Fatalf("the pod's file: %v", err)
	}
}

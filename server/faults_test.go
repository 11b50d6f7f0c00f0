package server_test

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
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
	if !runJob(t, e.srv, ctx, e.srv.Sweeper.ReconcileJob()) {
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
// dir, as `warmpool serve --driver fake --fake-state-dir DIR` does: through the driver
// registry, from those flags.
func withFakeStateDir(t *testing.T, dir string) envOption {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	drivers := driver.AddFlags(fs, func(string) string { return "" })
	if err := fs.Parse([]string{"--fake-state-dir", dir}); err != nil {
		t.Fatal(err)
	}
	f, err := drivers.Pick(fake.Name)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *server.Config) { c.Driver, c.DriverName, c.NewDriver = nil, fake.Name, f.New }
}

// Issue 12.7: two replicas on the fake driver keep each other's pods. Each used to
// have its pods in its own memory, so the other's watch and reconcile took them for
// pods gone from the driver and purged them (with their sessions) once the ghost grace
// (30s) had passed. With one --fake-state-dir they see the same pods.
func TestFakeReplicasKeepEachOthersPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	rs := newReplicas(t, withFakeStateDir(t, dir))
	rs.a.putScope("f", scopeCfg(4, 2, 0, 1))
	pod := rs.a.route("f", "s1")["pod_id"] // deployed by a's driver
	rs.clock.Advance(2 * time.Minute)      // past the ghost and orphan graces
	for _, job := range []string{sweeper.WatchJobName(redisstore.DueShard("f")), "reconcile"} {
		if !runJob(t, rs.b.srv, ctx, jobNamed(t, rs.b.srv, job)) {
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

// Issue 20.7: Redis stops (SIGSTOP, 3 s) while a leader registers its ready pod and a
// follower waits for it; the replica's production client gives up on each call after
// 1 s. A register that misses Redis is tried again while the deploy lease holds: with
// the default 30 s lease the pod is registered once Redis is back and both routes get
// it. With a 2 s lease the keep-alive gives up first: the pod is deleted, its lease
// given up, and the routes answer 503 with Retry-After. Neither answers 502: a retry
// finishes the work. Before, the leader answered 502 DEPLOY_FAILED (the register ran
// after its caller's deadline, or not at all) and deleted the ready pod, and the
// follower gave up at its first poll that Redis did not answer.
func TestRedisStallDuringRegister(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a redis-server of its own for seconds; skipped with -short")
	}
	for _, tc := range []struct {
		name       string
		lease      time.Duration
		registered bool
	}{
		{"registered after the stall", 0, true},
		{"lease gone before Redis is back", 2 * time.Second, false},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			const stall = 3 * time.Second
			ctx := context.Background()
			rs := testredis.StartServer(t)
			e := mustEnv(t, withRedisURL(rs.URL(), "wp:stall:"), func(c *server.Config) { c.RM.Lease = tc.lease })
			e.putScope("p", scopeCfg(4, 2, 4, 10)) // max_pods 2, two sessions a pod
			store := e.srv.Store()
			snap := func() redisstore.Snapshot {
				t.Helper()
				s, err := store.Snapshot(ctx, "p")
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			hold := e.fake.Hold()
			defer hold()
			answers := make([]resp, 2)
			var wg sync.WaitGroup
			for i, session := range []string{"lead", "follow"} {
				wg.Go(func() {
					answers[i] = e.do(http.MethodPost, "/v1/scopes/p/sessions", map[string]string{"session_id": session})
				})
				if i == 0 {
					await.True(t, 10*time.Second, "the leader's deploy in flight", func() bool { return e.fake.InFlight() == 1 })
				}
			}
			await.True(t, 10*time.Second, "the follower in the room", func() bool { return len(snap().Followers) == 1 })

			rs.Pause(t)
			paused := time.Now()
			hold() // the pod is ready: its register goes to a stopped Redis
			await.True(t, 10*time.Second, "the driver's deploy returned", func() bool { return e.fake.InFlight() == 0 })
			for time.Since(paused) < stall {
				time.Sleep(20 * time.Millisecond) // the stall is the fault: it lasts its length
			}
			rs.Resume(t)
			wg.Wait()

			pods := map[string]bool{}
			for _, r := range answers {
				t.Logf("%v after %v", r, r.took.Round(time.Millisecond))
				switch {
				case r.status == http.StatusOK:
					pods[r.obj(t)["pod_id"].(string)] = true
				case r.status == http.StatusServiceUnavailable:
					checkEnvelope(t, r) // with Retry-After
					if tc.registered {
						t.Errorf("%v: want the pod registered after the stall", r)
					}
				default:
					t.Errorf("%v: want 200, or 503 with Retry-After", r)
				}
				if bound := stall + 5*time.Second; r.took > bound {
					t.Errorf("%v took %v, want within %v", r, r.took, bound)
				}
			}
			if tc.registered && len(pods) != 1 {
				t.Fatalf("the two routes got pods %v, want the one registered after the stall", pods)
			}
			if !tc.registered {
				// The leftovers of calls Redis never got (a room entry, a lease) expire by
				// their deadlines; the next routes serve both sessions on a new pod.
				e.clock.Advance(time.Minute)
				for _, session := range []string{"lead", "follow"} {
					pods[e.route("p", session)["pod_id"].(string)] = true
				}
			}
			rec, err := store.Scope(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, store, "p", rec.Config, true)
			s := snap()
			var inDriver []string
			for _, p := range e.fake.Pods() {
				inDriver = append(inDriver, p.ID)
			}
			if len(s.Pods) != 1 || len(inDriver) != 1 || inDriver[0] != s.Pods[0].Pod.ID || len(s.Sessions) != 2 {
				t.Errorf("pods in Redis %+v, in the driver %v, sessions %v; want one pod, the same, with both sessions", s.Pods, inDriver, s.Sessions)
			}
		})
	}
}

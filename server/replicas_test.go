package server_test

// The in-process two-replica suite: two complete replicas (replica-a and replica-b, each
// with its own Redis client, HTTP server and sweeper Runner) share one Redis, one fake pod
// driver, one config store and one clock, as replicas behind a load balancer share their
// backing services. They are driven only through HTTP, plus the Runners and the fake
// driver's knobs for the sweeper and deploy-timing cases. The cases follow the reference
// service's two-replica table (14 cases), adapted to SPEC; see each test's comment.

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
)

// replicas is a pair of complete replicas on shared backing services.
type replicas struct {
	t       *testing.T
	a, b    *env
	r       *testredis.Redis
	fake    *fake.Driver
	clock   *testredis.Clock
	store   *redisstore.Store // the test's own view of the shared Redis
	configs *gatedStore
}

// gatedStore is the shared config store; while gated, List blocks (after saying so on
// entered) until the gate is opened, so a test can hold a config sync mid-way.
type gatedStore struct {
	warmpool.ConfigStore
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

// hold makes the next List calls block until the returned function is called; entered
// gets a value for each call that blocks.
func (g *gatedStore) hold() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{}, 16)
	gate, ent := g.gate, g.entered
	var once sync.Once
	return ent, func() {
		once.Do(func() {
			g.mu.Lock()
			g.gate = nil
			g.mu.Unlock()
			close(gate)
		})
	}
}

func (g *gatedStore) List(ctx context.Context) ([]warmpool.StoredConfig, error) {
	g.mu.Lock()
	gate, ent := g.gate, g.entered
	g.mu.Unlock()
	if gate != nil {
		ent <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.ConfigStore.List(ctx)
}

// newReplicas builds replica-a and replica-b; opts apply to both configs. Everything is
// closed with the test.
func newReplicas(t *testing.T, opts ...envOption) *replicas {
	t.Helper()
	b := testserver.NewBacking(t)
	r := b.Redis
	rs := &replicas{t: t, r: r, fake: b.Fake, clock: testredis.NewClock(), store: redisstore.NewStore(r.Client, r.Prefix),
		configs: &gatedStore{ConfigStore: b.Store}}
	mk := func(id string) *env {
		cfg := b.Config(id)
		cfg.Redis = r.NewClient(t) // each replica has its own connections
		cfg.Store, cfg.Clock = rs.configs, rs.clock
		cfg.Sweep = sweeper.Config{Interval: 20 * time.Millisecond, Reconcile: 20 * time.Millisecond, PassDuty: 1}
		for _, o := range opts {
			o(&cfg)
		}
		srv, ts := testserver.Serve(t, cfg)
		return &env{t: t, srv: srv, ts: ts, r: r, fake: b.Fake, clock: rs.clock, client: &http.Client{Timeout: 30 * time.Second}}
	}
	rs.a, rs.b = mk("replica-a"), mk("replica-b")
	return rs
}

func withRecheck(d time.Duration) envOption {
	return func(c *server.Config) { c.SM.Recheck = d }
}

// pick alternates the replicas: a for even i, b for odd.
func (rs *replicas) pick(i int) *env {
	if i%2 == 0 {
		return rs.a
	}
	return rs.b
}

// check requires the SPEC §6 invariants on the scope's state in Redis; settled also
// requires that no work is in flight. versions are the deploy_vers sessions may be on
// (default: the current one).
func (rs *replicas) check(scope string, settled bool, versions ...string) {
	rs.t.Helper()
	ctx := context.Background()
	rec, err := rs.store.Scope(ctx, scope)
	if err != nil {
		rs.t.Fatal(err)
	}
	snap, err := rs.store.Snapshot(ctx, scope)
	if err != nil {
		rs.t.Fatal(err)
	}
	if len(versions) == 0 {
		versions = []string{rec.DeployVer}
	}
	if v := invariant.Violations(snap, rec.Config, versions, settled); len(v) > 0 {
		rs.t.Fatalf("invariants of %s: %v", scope, v)
	}
}

// settle awaits, through both replicas' GET /pool, a scope with no placeholder, follower
// or waiter left, then checks the invariants as settled.
func (rs *replicas) settle(scope string, versions ...string) {
	rs.t.Helper()
	await.True(rs.t, 5*time.Second, scope+": placeholders, followers and waiters back to 0", func() bool {
		for _, e := range []*env{rs.a, rs.b} {
			p := e.pool(scope)
			if num(rs.t, p, "placeholders") != 0 || num(rs.t, p, "followers") != 0 || num(rs.t, p, "waiters") != 0 {
				return false
			}
		}
		return true
	})
	rs.check(scope, true, versions...)
}

// podsOf returns the pool's pods by id.
func podsOf(p map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, x := range p["pods"].([]any) {
		pp := x.(map[string]any)
		out[pp["pod_id"].(string)] = pp
	}
	return out
}

// inflight is a batch of concurrent requests.
type inflight struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	out  []resp
	done int
	ch   chan struct{}
}

// start sends n requests at once, request i from fn(i).
func start(n int, fn func(i int) resp) *inflight {
	f := &inflight{out: make([]resp, n), ch: make(chan struct{}, n)}
	for i := range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			r := fn(i)
			f.mu.Lock()
			f.out[i] = r
			f.done++
			f.mu.Unlock()
			f.ch <- struct{}{}
		}()
	}
	return f
}

// awaitDone waits until n of the requests have answered.
func (f *inflight) awaitDone(tb testing.TB, n int, within time.Duration) {
	tb.Helper()
	timeout := time.After(within)
	for {
		f.mu.Lock()
		d := f.done
		f.mu.Unlock()
		if d >= n {
			return
		}
		select {
		case <-f.ch:
		case <-timeout:
			tb.Fatalf("only %d of %d answers within %s", d, n, within)
		}
	}
}

func (f *inflight) wait() []resp {
	f.wg.Wait()
	return f.out
}

// routeReq is the route call of session through e.
func routeReq(e *env, scope, session string, hdrs ...header) resp {
	return e.do(http.MethodPost, "/v1/scopes/"+scope+"/sessions", map[string]string{"session_id": session}, hdrs...)
}

// awaitPool waits until cond holds on the scope's pool as replica e reports it.
func awaitPool(t *testing.T, e *env, scope, what string, cond func(p map[string]any) bool) {
	t.Helper()
	await.True(t, 5*time.Second, what, func() bool { return cond(e.pool(scope)) })
}

// holdDeploys holds the fake's deploys until the returned function (also run at
// cleanup) is called.
func (rs *replicas) holdDeploys() func() {
	release := rs.fake.Hold()
	rs.t.Cleanup(release)
	return release
}

func (rs *replicas) waitInFlight(n int) {
	rs.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rs.fake.WaitInFlight(ctx, n); err != nil {
		rs.t.Fatal(err)
	}
}

// Case 1, identity and shared state: the replicas are distinct instances, yet a config
// put through one, a session routed through one, and the pool are the same seen from
// either; a session made on A is touched, read and ended on B.
func TestReplicaIdentityAndSharedState(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	a, b := rs.a, rs.b
	if ia, ib := a.ok(http.MethodGet, "/healthz", nil)["instance_id"], b.ok(http.MethodGet, "/healthz", nil)["instance_id"]; ia != "replica-a" || ib != "replica-b" {
		t.Fatalf("instance ids %v and %v", ia, ib)
	}
	put := a.putScope("shared", scopeCfg(4, 2, 0, 1))
	got := b.ok(http.MethodGet, "/v1/scopes/shared/config", nil)
	if got["version"] != put["version"] || got["deploy_ver"] != put["deploy_ver"] {
		t.Fatalf("config put on A %v, read on B %v", put, got)
	}

	bind := a.route("shared", "s1")
	onB := b.ok(http.MethodGet, "/v1/scopes/shared/sessions/s1", nil)
	if onB["pod_id"] != bind["pod_id"] || onB["pod_sse_url"] != bind["pod_sse_url"] || onB["deploy_ver"] != put["deploy_ver"] {
		t.Fatalf("routed on A %v, read on B %v", bind, onB)
	}
	if touch := b.ok(http.MethodPost, "/v1/scopes/shared/sessions/s1/touch", nil); touch["touched"] != true {
		t.Fatalf("B's touch of A's session: %v", touch)
	}
	if pa, pb := a.pool("shared"), b.pool("shared"); !reflect.DeepEqual(pa, pb) {
		t.Fatalf("pool on A %v, on B %v", pa, pb)
	}
	if sa, sb := a.ok(http.MethodGet, "/v1/scopes", nil), b.ok(http.MethodGet, "/v1/scopes", nil); !reflect.DeepEqual(sa, sb) {
		t.Fatalf("scopes on A %v, on B %v", sa, sb)
	}
	if end := b.ok(http.MethodDelete, "/v1/scopes/shared/sessions/s1", nil); end["released"] != true {
		t.Fatalf("B's end of A's session: %v", end)
	}
	pp := podsOf(a.pool("shared"))[bind["pod_id"].(string)]
	if pp == nil || pp["state"] != "idle" || num(t, pp, "sessions") != 0 {
		t.Fatalf("A sees the pod after B's end as %v", pp)
	}
	a.wantErr(a.do(http.MethodGet, "/v1/scopes/shared/sessions/s1", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	// A reuses the pod B put back.
	if s2 := a.route("shared", "s2"); s2["pod_id"] != bind["pod_id"] || rs.fake.DeployCount() != 1 {
		t.Fatalf("s2 on A: %v after %d deploys, want the idle pod %v", s2, rs.fake.DeployCount(), bind["pod_id"])
	}
	rs.settle("shared")
}

// Case 2, alternating affinity: one session routed A, B, A, B always gets its one pod;
// a second session, alternating the other way, fits on the same pod (first fit).
func TestReplicaAlternatingAffinity(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("aff", scopeCfg(4, 2, 0, 1))
	var pod any
	for i := range 4 {
		for _, s := range []struct {
			session string
			e       *env
		}{{"s1", rs.pick(i)}, {"s2", rs.pick(i + 1)}} {
			got := s.e.route("aff", s.session)
			if pod == nil {
				pod = got["pod_id"]
			}
			if got["pod_id"] != pod || got["new"] != (i == 0) {
				t.Fatalf("round %d, %s via %s: %v, want pod %v new=%v", i, s.session, s.e.srv.InstanceID(), got, pod, i == 0)
			}
		}
	}
	snap, err := rs.store.Snapshot(context.Background(), "aff")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sessions) != 2 || snap.Sessions["s1"] != pod || snap.Sessions["s2"] != pod {
		t.Fatalf("sessions %v, want s1 and s2 on %v", snap.Sessions, pod)
	}
	pods := podsOf(rs.b.pool("aff"))
	if len(pods) != 1 || num(t, pods[pod.(string)], "sessions") != 2 || rs.fake.DeployCount() != 1 {
		t.Fatalf("pool %v after %d deploys, want one pod with 2 sessions", pods, rs.fake.DeployCount())
	}
	rs.settle("aff")
}

// Case 3, a cross-replica burst never over-admits.
func TestReplicaBurstNoOverAdmission(t *testing.T) {
	t.Parallel()
	// The reference case: a scope at capacity (2 pods of 1 session) and 8 concurrent new
	// sessions alternating A/B: none gets in; the queue (4) fills, the other 4 are told
	// QUEUE_FULL at once, the queued 4 time out with WAIT_TIMEOUT.
	t.Run("at capacity", func(t *testing.T) {
		t.Parallel()
		rs := newReplicas(t)
		rs.a.putScope("cap", scopeCfg(2, 1, 4, 2))
		p1, p2 := rs.a.route("cap", "s1")["pod_id"], rs.b.route("cap", "s2")["pod_id"]
		if p1 == p2 {
			t.Fatalf("two sessions of pod_concurrency 1 on one pod %v", p1)
		}
		f := start(8, func(i int) resp { return routeReq(rs.pick(i), "cap", fmt.Sprintf("b%d", i)) })
		full, timedOut := 0, 0
		for i, r := range f.wait() {
			e := rs.pick(i)
			switch r.status {
			case http.StatusServiceUnavailable:
				e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeQueueFull)
				if r.took > time.Second {
					t.Fatalf("QUEUE_FULL after %s: it must not wait", r.took)
				}
				full++
			case http.StatusGatewayTimeout:
				e.wantErr(r, http.StatusGatewayTimeout, warmpool.CodeWaitTimeout)
				if r.took < 1900*time.Millisecond {
					t.Fatalf("WAIT_TIMEOUT after %s, want wait_timeout_s (2s)", r.took)
				}
				timedOut++
			default:
				t.Fatalf("burst request %d: %v", i, r)
			}
		}
		if full != 4 || timedOut != 4 {
			t.Fatalf("%d QUEUE_FULL and %d WAIT_TIMEOUT, want 4 and 4", full, timedOut)
		}
		pods := podsOf(rs.b.pool("cap"))
		if len(pods) != 2 || num(t, pods[p1.(string)], "sessions") != 1 || num(t, pods[p2.(string)], "sessions") != 1 || rs.fake.DeployCount() != 2 {
			t.Fatalf("pool after the burst %v, %d deploys", pods, rs.fake.DeployCount())
		}
		rs.settle("cap")
	})
	// SPEC §7: a cold burst of N = max_concurrency (8, pod_concurrency 2, no parallel
	// bound) across both replicas deploys exactly ceil(N/pc) = 4 pods side by side, and
	// every request is served; one more is refused, not over-admitted.
	t.Run("cold", func(t *testing.T) {
		t.Parallel()
		rs := newReplicas(t)
		rs.b.putScope("cold", scopeCfg(8, 2, 0, 1))
		release := rs.holdDeploys()
		f := start(8, func(i int) resp { return routeReq(rs.pick(i), "cold", fmt.Sprintf("c%d", i)) })
		rs.waitInFlight(4)
		awaitPool(t, rs.a, "cold", "4 deploys with full rooms", func(p map[string]any) bool {
			return num(t, p, "placeholders") == 4 && num(t, p, "followers") == 4
		})
		// At max_pods with every room full: the ninth is refused at once.
		rs.b.wantErr(routeReq(rs.b, "cold", "c9"), http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
		rs.check("cold", false)
		release()
		perPod := map[string]int{}
		for i, r := range f.wait() {
			if r.status != http.StatusOK {
				t.Fatalf("burst request %d: %v", i, r)
			}
			perPod[r.obj(t)["pod_id"].(string)]++
		}
		if n, ov := rs.fake.DeployCount(), rs.fake.MaxOverlap(); n != 4 || ov != 4 || len(perPod) != 4 {
			t.Fatalf("%d deploys (max overlap %d) onto %d pods, want 4 side by side", n, ov, len(perPod))
		}
		for pod, n := range perPod {
			if n != 2 {
				t.Fatalf("pod %s got %d sessions, want 2: %v", pod, n, perPod)
			}
		}
		rs.settle("cold")
	})
}

// Case 4, deploy serialisation and follower reuse (max_parallel_deploys 1, the reference
// behaviour): a cold route on A and one on B make exactly one deploy, the loser waiting
// in its room and taking the same pod; while it runs no second deploy can start; a third
// session, once the pod is full, makes the second deploy, and no two deploy windows
// overlap.
func TestReplicaDeploySerialisation(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("ser", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":2,"queue_size":0,"max_parallel_deploys":1}}`)
	release := rs.holdDeploys()
	f := start(2, func(i int) resp { return routeReq(rs.pick(i), "ser", fmt.Sprintf("s%d", i+1)) })
	rs.waitInFlight(1)
	awaitPool(t, rs.b, "ser", "one deploy with one follower", func(p map[string]any) bool {
		return num(t, p, "placeholders") == 1 && num(t, p, "followers") == 1
	})
	// The room is full and the scope may run one deploy: no second one starts.
	rs.b.wantErr(rs.b.do(http.MethodPost, "/v1/scopes/ser/pods/acquire", `{}`), http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
	if n := rs.fake.DeployCount(); n != 1 {
		t.Fatalf("%d deploys while one is in flight, want 1", n)
	}
	release()
	out := f.wait()
	for _, r := range out {
		if r.status != http.StatusOK {
			t.Fatalf("cold route: %v", r)
		}
	}
	pod1 := out[0].obj(t)["pod_id"]
	if out[1].obj(t)["pod_id"] != pod1 || rs.fake.DeployCount() != 1 {
		t.Fatalf("A got %v, B got %v after %d deploys: want one pod", out[0], out[1], rs.fake.DeployCount())
	}
	s3 := rs.a.route("ser", "s3")
	if s3["pod_id"] == pod1 || rs.fake.DeployCount() != 2 {
		t.Fatalf("s3 %v after %d deploys: want a second pod", s3, rs.fake.DeployCount())
	}
	if ov := rs.fake.MaxOverlap(); ov != 1 {
		t.Fatalf("deploy windows overlap (max %d)", ov)
	}
	rs.settle("ser")
}

// Case 5, the loser reuses the other replica's pod: while B's autoscale job deploys a
// warm pod (max_parallel_deploys 1, so nobody else may deploy), a cold route on A takes
// a place on that deploy and gets its pod, deploying nothing itself; later the pod,
// idle again, is handed out warm on A.
func TestReplicaLoserReusesWarmPod(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("warm", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":2,"min_idle_pods":1,"queue_size":0,"max_parallel_deploys":1}}`)
	release := rs.holdDeploys()
	if !runJob(t, rs.b.srv, context.Background(), dueJob(t, rs.b.srv, "warm")) {
		t.Fatal("B's due job of the scope did not run")
	}
	rs.waitInFlight(1)
	f := start(1, func(int) resp { return routeReq(rs.a, "warm", "s1") })
	awaitPool(t, rs.a, "warm", "A's route waits on B's warm deploy", func(p map[string]any) bool {
		return num(t, p, "placeholders") == 1 && num(t, p, "followers") == 1
	})
	release()
	r := f.wait()[0]
	if r.status != http.StatusOK {
		t.Fatalf("A's route: %v", r)
	}
	deploys := rs.fake.Deploys()
	if len(deploys) != 1 || r.obj(t)["pod_id"] != deploys[0].Pod.ID {
		t.Fatalf("A's route got %v; deploys %v: want the warm deploy's pod and no other deploy", r, deploys)
	}
	rs.settle("warm")
	// Idle again (ended on B), the pod is handed out warm on A.
	rs.b.ok(http.MethodDelete, "/v1/scopes/warm/sessions/s1", nil)
	acq := rs.a.ok(http.MethodPost, "/v1/scopes/warm/pods/acquire", `{}`)
	if acq["source"] != warmpool.SourceWarm || acq["pod_id"] != deploys[0].Pod.ID || rs.fake.DeployCount() != 1 {
		t.Fatalf("acquire on A: %v after %d deploys", acq, rs.fake.DeployCount())
	}
	if rel := rs.b.ok(http.MethodPost, "/v1/scopes/warm/pods/"+deploys[0].Pod.ID+"/release", map[string]any{"hold_id": acq["hold_id"]}); rel["idle"] != true {
		t.Fatalf("release on B: %v", rel)
	}
	rs.settle("warm")
}

// Case 6, cross-replica wake-up: A's scope is full and a route waits in A's queue; the
// session holding the capacity expires, B's touch finds it expired (touched:false, lazy
// eviction) and the wake-up B publishes reaches A's waiter, which takes the freed slot.
// A re-checks only every 10s, so only the wake-up can serve it in time.
func TestReplicaCrossWakeUp(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, withRecheck(10*time.Second))
	rs.a.putScope("wake", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":1,"pod_concurrency":1,"session_ttl_s":10,"queue_size":1,"wait_timeout_s":20}}`)
	first := rs.a.route("wake", "s1")
	f := start(1, func(int) resp { return routeReq(rs.a, "wake", "s2") })
	awaitPool(t, rs.b, "wake", "s2 queued on A", func(p map[string]any) bool { return num(t, p, "waiters") == 1 })

	rs.clock.Advance(11 * time.Second)
	touched := time.Now()
	if touch := rs.b.ok(http.MethodPost, "/v1/scopes/wake/sessions/s1/touch", nil); touch["touched"] != false {
		t.Fatalf("B's touch of the expired session: %v", touch)
	}
	r := f.wait()[0]
	if took := time.Since(touched); took > 2*time.Second {
		t.Fatalf("A's waiter woken %s after B freed the slot", took)
	}
	if r.status != http.StatusOK {
		t.Fatalf("A's queued route: %v", r)
	}
	if b := r.obj(t); b["pod_id"] != first["pod_id"] || b["new"] != true {
		t.Fatalf("A's queued route got %v, want the freed pod %v", b, first["pod_id"])
	}
	rs.a.wantErr(rs.a.do(http.MethodGet, "/v1/scopes/wake/sessions/s1", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	rs.settle("wake")
}

// Case 7, idempotent replay across replicas: a route with a request id made on A and
// replayed on B (body or Idempotency-Key) gets the same answer and makes one session;
// concurrent attempts of one request id on both replicas during a cold deploy make one
// deploy and one session.
func TestReplicaIdempotentReplay(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("idem", scopeCfg(8, 2, 0, 1))
	first := rs.a.ok(http.MethodPost, "/v1/scopes/idem/sessions", `{"session_id":"s1","request_id":"r1"}`)
	replay := rs.b.ok(http.MethodPost, "/v1/scopes/idem/sessions", `{"session_id":"s1","request_id":"r1"}`)
	byHeader := rs.b.ok(http.MethodPost, "/v1/scopes/idem/sessions", `{"session_id":"s1"}`, header{"Idempotency-Key", "r1"})
	if first["new"] != true || !reflect.DeepEqual(first, replay) || !reflect.DeepEqual(first, byHeader) {
		t.Fatalf("first on A %v, replays on B %v and %v", first, replay, byHeader)
	}

	if s := podsOf(rs.a.pool("idem")); len(s) != 1 || num(t, s[first["pod_id"].(string)], "sessions") != 1 {
		t.Fatalf("pool after the replays: %v", s)
	}

	// Concurrent attempts of one request id on both replicas, on a cold scope.
	rs.b.putScope("idemc", scopeCfg(8, 2, 0, 1))
	release := rs.holdDeploys()
	f := start(4, func(i int) resp { return routeReq(rs.pick(i), "idemc", "s2", header{"Idempotency-Key", "r2"}) })
	rs.waitInFlight(1)
	release()
	out := f.wait()
	for i, r := range out {
		if r.status != http.StatusOK || !reflect.DeepEqual(r.obj(t), out[0].obj(t)) || r.obj(t)["new"] != true {
			t.Fatalf("attempt %d: %v (first %v)", i, r, out[0])
		}
	}
	snap, err := rs.store.Snapshot(context.Background(), "idemc")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sessions) != 1 || len(snap.Pods) != 1 || rs.fake.DeployCount() != 2 {
		t.Fatalf("sessions %v on %d pods after %d deploys: want one session, one cold deploy", snap.Sessions, len(snap.Pods), rs.fake.DeployCount())
	}
	rs.settle("idem")
	rs.settle("idemc")
}

// jobNamed returns the replica's sweeper job of that name.
func jobNamed(t *testing.T, srv *server.Server, name string) sweeper.Job {
	t.Helper()
	for _, j := range srv.Sweeper.Jobs() {
		if j.Name == name {
			return j
		}
	}
	t.Fatalf("no job %q", name)
	return sweeper.Job{}
}

// lockedJob is the job of srv named name, asked for its lock even when it has nothing
// to do (its Idle check left out), as the tests of the locks want.
func lockedJob(t *testing.T, srv *server.Server, name string) sweeper.Job {
	t.Helper()
	j := jobNamed(t, srv, name)
	j.Idle = nil
	return j
}

// runJob runs job j on srv's runner now, if its lock is free, and reports whether it
// ran; a run that failed fails the test.
func runJob(t *testing.T, srv *server.Server, ctx context.Context, j sweeper.Job) bool {
	t.Helper()
	ran, err := srv.Runner.RunOnce(ctx, j)
	if err != nil {
		t.Fatalf("job %s: %v", j.Name, err)
	}
	return ran
}

// dueJob returns the replica's due job of the shard that holds scope.
func dueJob(t *testing.T, srv *server.Server, scope string) sweeper.Job {
	t.Helper()
	return jobNamed(t, srv, sweeper.DueJobName(redisstore.DueShard(scope)))
}

// Case 8, config changes reach every replica at once: a pool-only change (class B) put
// on B is B's and A's at once with no pod touched; a deploy change (class A) put on B
// sends A's next new session to a pod of the new deploy_ver, while the busy old pod
// keeps its sessions and the idle old pod is never handed out and is reclaimed by B's
// next sweep.
func TestReplicaConfigChangeAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	cfg := func(image string, maxConc int) string {
		return fmt.Sprintf(`{"deploy":{"image":%q,"ready_timeout_s":10},"pool":{"max_concurrency":%d,"pod_concurrency":2,"queue_size":0}}`, image, maxConc)
	}
	v1 := rs.a.putScope("cfg", cfg("registry.example/agent:1.4", 6))
	dv1 := v1["deploy_ver"].(string)
	p1 := rs.a.route("cfg", "s1")["pod_id"]
	if s2 := rs.b.route("cfg", "s2"); s2["pod_id"] != p1 {
		t.Fatalf("s2 %v, want first fit on %v", s2, p1)
	}
	p2 := rs.b.route("cfg", "s3")["pod_id"]
	rs.a.ok(http.MethodDelete, "/v1/scopes/cfg/sessions/s3", nil)

	// Class B on B: seen on A at once, same deploy_ver, no pod touched.
	v2 := rs.b.putScope("cfg", cfg("registry.example/agent:1.4", 8))
	if num(t, v2, "version") != 2 || v2["deploy_ver"] != dv1 {
		t.Fatalf("pool-only change: %v", v2)
	}
	if pa := rs.a.pool("cfg"); num(t, pa, "max_pods") != 4 || len(podsOf(pa)) != 2 || rs.fake.DeployCount() != 2 {
		t.Fatalf("A's pool after the pool-only change on B: %v", pa)
	}

	// Class A on B.
	v3 := rs.b.putScope("cfg", cfg("registry.example/agent:1.5", 8))
	dv3 := v3["deploy_ver"].(string)
	if dv3 == dv1 {
		t.Fatalf("deploy change kept deploy_ver %s", dv1)
	}
	if got := rs.a.ok(http.MethodGet, "/v1/scopes/cfg/config", nil); num(t, got, "version") != 3 || got["deploy_ver"] != dv3 {
		t.Fatalf("A reads %v after B's put", got)
	}
	s4 := rs.a.route("cfg", "s4")
	if s4["deploy_ver"] != dv3 || s4["pod_id"] == p1 || s4["pod_id"] == p2 || rs.fake.DeployCount() != 3 {
		t.Fatalf("s4 on A %v after %d deploys: want a new pod of %s", s4, rs.fake.DeployCount(), dv3)
	}
	if s1 := rs.b.route("cfg", "s1"); s1["pod_id"] != p1 || s1["new"] != false || s1["deploy_ver"] != dv1 {
		t.Fatalf("s1 on B after the change: %v, want its old pod %v", s1, p1)
	}
	if !runJob(t, rs.b.srv, context.Background(), dueJob(t, rs.b.srv, "cfg")) {
		t.Fatal("B's due job of the scope did not run")
	}
	pods := podsOf(rs.a.pool("cfg"))
	if len(pods) != 2 || pods[p1.(string)] == nil || pods[s4["pod_id"].(string)] == nil || !slices.Contains(rs.fake.Deleted(), p2.(string)) {
		t.Fatalf("pool after B's reclaim %v (deleted %v): want %v kept and idle %v of the old version reclaimed", pods, rs.fake.Deleted(), p1, p2)
	}
	rs.settle("cfg", dv1, dv3)
}

// Case 9, config sync is serialised across replicas: while B's sync runs (held inside
// the config store), A's sync answers 409 CONFIG_SYNC_BUSY at once while routing goes
// on; afterwards both sync, and the lock is gone.
func TestReplicaConfigSyncSerialised(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("x", scopeCfg(4, 2, 0, 1))
	rs.b.putScope("y", scopeCfg(4, 2, 0, 1))
	entered, release := rs.configs.hold()
	t.Cleanup(release)
	f := start(1, func(int) resp { return rs.b.do(http.MethodPost, "/v1/config/sync", nil) })
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("B's sync never reached the config store")
	}
	r := rs.a.do(http.MethodPost, "/v1/config/sync", nil)
	rs.a.wantErr(r, http.StatusConflict, warmpool.CodeConfigSyncBusy)
	if r.took > time.Second {
		t.Fatalf("CONFIG_SYNC_BUSY after %s", r.took)
	}
	rs.a.route("x", "s1")
	release()
	if b := f.wait()[0]; b.status != http.StatusOK || num(t, b.obj(t), "scopes") != 2 {
		t.Fatalf("B's sync: %v", b)
	}
	if a := rs.a.ok(http.MethodPost, "/v1/config/sync", nil); num(t, a, "scopes") != 2 {
		t.Fatalf("A's sync after B's: %v", a)
	}
	if n, err := rs.r.Client.Exists(context.Background(), rs.store.Keys().Lock("config_sync")).Result(); err != nil || n != 0 {
		t.Fatalf("sync lock left behind (%d, %v)", n, err)
	}
	rs.settle("x")
}

// runLog records the outcome of every job run of a replica's Runner.
type runLog struct {
	mu   sync.Mutex
	runs map[string][]string // job -> outcomes
	stop bool
}

func logRuns(srv *server.Server) *runLog {
	l := &runLog{runs: map[string][]string{}}
	prev := srv.Runner.OnRun
	srv.Runner.OnRun = func(job, outcome string, held time.Duration) {
		prev(job, outcome, held)
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.stop {
			l.runs[job] = append(l.runs[job], outcome)
		}
	}
	return l
}

// outcomes returns how often each outcome was seen, over every job.
func (l *runLog) outcomes() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, os := range l.runs {
		for _, o := range os {
			out[o]++
		}
	}
	return out
}

// ran returns how many runs of job ended with outcome.
func (l *runLog) ran(job, outcome string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.runs[job] {
		if o == outcome {
			n++
		}
	}
	return n
}

// noLocksLeft fails the test when a job lock key is still in Redis.
func (rs *replicas) noLocksLeft() {
	rs.t.Helper()
	var left []string
	for _, j := range rs.a.srv.Sweeper.Jobs() {
		key := rs.store.Keys().Lock("sweep:" + j.Name)
		n, err := rs.r.Client.Exists(context.Background(), key).Result()
		if err != nil {
			rs.t.Fatal(err)
		}
		if n > 0 {
			left = append(left, key)
		}
	}
	if len(left) != 0 {
		rs.t.Fatalf("locks left behind: %v", left)
	}
}

// Case 10, sweeper mutual exclusion: while another holder has a job's lock
// (<prefix>lock:sweep:<job>), RunOnce of that job on either replica returns false and
// does nothing (an idle pod past pod_ttl_s stays); once the lock is released, the job
// runs and does its work, and leaves no lock behind.
func TestReplicaSweeperMutualExclusion(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	ctx := context.Background()
	rs.a.putScope("sw", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":1,"pod_ttl_s":60,"queue_size":0}}`)
	pod := rs.a.route("sw", "s1")["pod_id"].(string)
	rs.b.ok(http.MethodDelete, "/v1/scopes/sw/sessions/s1", nil)
	rs.clock.Advance(61 * time.Second)
	logs := []*runLog{logRuns(rs.a.srv), logRuns(rs.b.srv)}

	jobs := rs.a.srv.Sweeper.Jobs()
	held := map[string]*redisstore.Lock{}
	tokens := map[string]string{}
	for _, j := range jobs {
		key := rs.store.Keys().Lock("sweep:" + j.Name)
		if want := rs.r.Prefix + "lock:sweep:" + j.Name; key != want {
			t.Fatalf("lock key %q, want %q", key, want)
		}
		l, err := rs.store.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("taking %s: %v", key, err)
		}
		held[j.Name] = l
		tokens[key], _ = rs.r.Client.Get(ctx, key).Result()
	}
	for _, e := range []*env{rs.a, rs.b} {
		for _, j := range jobs {
			if runJob(t, e.srv, ctx, lockedJob(t, e.srv, j.Name)) {
				t.Fatalf("%s ran %s while another holder has its lock", e.srv.InstanceID(), j.Name)
			}
		}
	}
	for _, j := range jobs {
		key := rs.store.Keys().Lock("sweep:" + j.Name)
		if tok, err := rs.r.Client.Get(ctx, key).Result(); err != nil || tok != tokens[key] {
			t.Fatalf("%s holds %q (%v) after skipped runs", key, tok, err)
		}
	}
	if pp := podsOf(rs.a.pool("sw"))[pod]; pp == nil || pp["state"] != "idle" || len(rs.fake.Deleted()) != 0 {
		t.Fatalf("a skipped reclaim touched the pool: %v, deleted %v", pp, rs.fake.Deleted())
	}
	for _, l := range logs {
		if o := l.outcomes(); o["skipped"] != len(jobs) || len(o) != 1 {
			t.Fatalf("run outcomes %v, want %d skipped", o, len(jobs))
		}
	}

	for _, j := range jobs {
		if err := held[j.Name].Release(ctx); err != nil {
			t.Fatalf("releasing %s: %v", j.Name, err)
		}
	}
	if !runJob(t, rs.a.srv, ctx, dueJob(t, rs.a.srv, "sw")) {
		t.Fatal("A's due job of the scope did not run after the lock was released")
	}
	if pods := podsOf(rs.b.pool("sw")); len(pods) != 0 || !slices.Equal(rs.fake.Deleted(), []string{pod}) {
		t.Fatalf("after the reclaim: pool %v, deleted %v, want %s reclaimed", pods, rs.fake.Deleted(), pod)
	}
	for _, j := range jobs {
		if !runJob(t, rs.b.srv, ctx, lockedJob(t, rs.b.srv, j.Name)) {
			t.Fatalf("B's %s did not run with its lock free", j.Name)
		}
	}
	if o := logs[1].outcomes(); o["ok"] != len(jobs) {
		t.Fatalf("B's run outcomes %v", o)
	}
	rs.noLocksLeft()
	rs.settle("sw")
}

// Case 11, concurrent sweeps converge: both replicas run every job at the same moment,
// then both Runners run their tickers side by side. No run fails; idle pods past
// pod_ttl_s are reclaimed, a dead pod is buried with its session, the busy pod and its
// session stay, nothing is deployed, and no lock is left behind.
func TestReplicaConcurrentSweepsConverge(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	ctx := context.Background()
	rs.a.putScope("conv", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":5,"pod_concurrency":1,"pod_ttl_s":60,"queue_size":0}}`)
	var pods []string
	for i := range 5 {
		pods = append(pods, rs.pick(i).route("conv", fmt.Sprintf("s%d", i))["pod_id"].(string))
	}
	for i := range 3 {
		rs.pick(i+1).ok(http.MethodDelete, fmt.Sprintf("/v1/scopes/conv/sessions/s%d", i), nil)
	}
	rs.fake.Kill(pods[3], "OOMKilled")
	rs.clock.Advance(61 * time.Second)
	logs := []*runLog{logRuns(rs.a.srv), logRuns(rs.b.srv)}

	converged := func(when string) {
		t.Helper()
		got := podsOf(rs.b.pool("conv"))
		if len(got) != 1 || got[pods[4]] == nil {
			t.Fatalf("%s: pool %v, want only %s", when, got, pods[4])
		}
		if live := rs.fake.Pods(); len(live) != 1 || live[0].ID != pods[4] {
			t.Fatalf("%s: driver has %v, want only %s", when, live, pods[4])
		}
		if b := rs.a.ok(http.MethodGet, "/v1/scopes/conv/sessions/s4", nil); b["pod_id"] != pods[4] {
			t.Fatalf("%s: s4 %v", when, b)
		}
		rs.a.wantErr(rs.a.do(http.MethodGet, "/v1/scopes/conv/sessions/s3", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
		if n := rs.fake.DeployCount(); n != 5 {
			t.Fatalf("%s: %d deploys, want the 5 of the routes", when, n)
		}
		for _, l := range logs {
			for o, n := range l.outcomes() {
				if o != "ok" && o != "skipped" && o != "idle" {
					t.Fatalf("%s: %d runs ended %q", when, n, o)
				}
			}
		}
	}

	// Every job on both replicas at once.
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, e := range []*env{rs.a, rs.b} {
		for _, j := range e.srv.Sweeper.Jobs() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				_, _ = e.srv.Runner.RunOnce(ctx, j) // one of them runs it; the others find it held
			}()
		}
	}
	close(gate)
	wg.Wait()
	for _, j := range rs.a.srv.Sweeper.Jobs() {
		if n := logs[0].ran(j.Name, "ok") + logs[1].ran(j.Name, "ok") + logs[0].ran(j.Name, "idle") + logs[1].ran(j.Name, "idle"); n == 0 {
			t.Fatalf("no replica ran %s", j.Name)
		}
	}
	converged("after one concurrent round")
	rs.noLocksLeft()

	// Both Runners on their tickers (20ms) until each replica has run every job a few
	// more times.
	runCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, e := range []*env{rs.a, rs.b} {
		running.Add(1)
		go func() { defer running.Done(); e.srv.Runner.Run(runCtx) }()
	}
	await.True(t, 10*time.Second, "every job run 3 more times", func() bool {
		for _, j := range rs.a.srv.Sweeper.Jobs() {
			if logs[0].ran(j.Name, "ok")+logs[1].ran(j.Name, "ok")+logs[0].ran(j.Name, "idle")+logs[1].ran(j.Name, "idle") < 4 {
				return false
			}
		}
		return true
	})
	for _, l := range logs {
		l.mu.Lock()
		l.stop = true // runs cut short by the cancel below end with the context's error
		l.mu.Unlock()
	}
	cancel()
	running.Wait()
	converged("after the Runners ran side by side")
	rs.noLocksLeft()
	rs.settle("conv")
}

// Case 12, /healthz per replica: each answers 200 with its own instance id (and
// /readyz says each is ready).
func TestReplicaHealthz(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	for _, c := range []struct {
		e  *env
		id string
	}{{rs.a, "replica-a"}, {rs.b, "replica-b"}} {
		h := c.e.ok(http.MethodGet, "/healthz", nil)
		keys(t, h, "status", "instance_id")
		if h["status"] != "ok" || h["instance_id"] != c.id {
			t.Fatalf("healthz of %s: %v", c.id, h)
		}
		if r := c.e.ok(http.MethodGet, "/readyz", nil); r["instance_id"] != c.id {
			t.Fatalf("readyz of %s: %v", c.id, r)
		}
	}
}

// Case 13, follower overflow. With max_parallel_deploys 1 (the reference): 4 concurrent
// cold routes (pod_concurrency 2, no queue) across both replicas make one deploy; the
// leader and one follower get its pod, the other 2 are refused at once, while the deploy
// is still running, with 503 NO_POD_AVAILABLE and Retry-After. With no parallel bound
// (SPEC §7), the same burst makes ceil(4/2) = 2 deploys side by side and all 4 succeed.
func TestReplicaFollowerOverflow(t *testing.T) {
	t.Parallel()
	burst := func(t *testing.T, parallel int) (*replicas, []resp) {
		rs := newReplicas(t)
		rs.a.putScope("ovf", fmt.Sprintf(`{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":8,"pod_concurrency":2,"queue_size":0,"max_parallel_deploys":%d}}`, parallel))
		release := rs.holdDeploys()
		f := start(4, func(i int) resp { return routeReq(rs.pick(i), "ovf", fmt.Sprintf("s%d", i)) })
		want := 2 // deploys in flight
		if parallel == 1 {
			want = 1
			f.awaitDone(t, 2, 5*time.Second) // the overflow answers before the deploy ends
		}
		rs.waitInFlight(want)
		awaitPool(t, rs.b, "ovf", "deploys with full rooms", func(p map[string]any) bool {
			return num(t, p, "placeholders") == want && num(t, p, "followers") == want
		})
		rs.check("ovf", false)
		release()
		return rs, f.wait()
	}
	t.Run("max_parallel_deploys 1", func(t *testing.T) {
		t.Parallel()
		rs, out := burst(t, 1)
		pods := map[string]int{}
		refused := 0
		for i, r := range out {
			if r.status == http.StatusOK {
				pods[r.obj(t)["pod_id"].(string)]++
				continue
			}
			rs.pick(i).wantErr(r, http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
			refused++
		}
		if len(pods) != 1 || refused != 2 || rs.fake.DeployCount() != 1 {
			t.Fatalf("served %v, refused %d, %d deploys: want 2 on one pod, 2 refused, 1 deploy", pods, refused, rs.fake.DeployCount())
		}
		rs.settle("ovf")
	})
	t.Run("no parallel bound", func(t *testing.T) {
		t.Parallel()
		rs, out := burst(t, 0)
		pods := map[string]int{}
		for i, r := range out {
			if r.status != http.StatusOK {
				t.Fatalf("route %d: %v", i, r)
			}
			pods[r.obj(t)["pod_id"].(string)]++
		}
		if len(pods) != 2 || rs.fake.DeployCount() != 2 || rs.fake.MaxOverlap() != 2 {
			t.Fatalf("served %v after %d deploys (overlap %d): want 2 pods deployed side by side", pods, rs.fake.DeployCount(), rs.fake.MaxOverlap())
		}
		for p, n := range pods {
			if n != 2 {
				t.Fatalf("pod %s got %d sessions, want 2", p, n)
			}
		}
		rs.settle("ovf")
	})
}

// Case 14, a failing leader: the deploy led by one replica fails (image pull) while a
// route on the other waits as its follower. The follower does not take the deploy over:
// both fail fast with DEPLOY_FAILED naming the cause, one deploy was tried, and no pod,
// placeholder, room entry or waiter is left; the scope then routes normally once its
// refill backoff (5 s after one failure) has passed.
func TestReplicaFailingLeader(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t)
	rs.a.putScope("fail", scopeCfg(8, 2, 0, 1))
	rs.fake.FailNext(1, "ErrImagePull: registry.example/agent:nope not found")
	release := rs.holdDeploys()
	f := start(2, func(i int) resp { return routeReq(rs.pick(i), "fail", fmt.Sprintf("s%d", i)) })
	rs.waitInFlight(1)
	awaitPool(t, rs.a, "fail", "a leader and a follower", func(p map[string]any) bool {
		return num(t, p, "placeholders") == 1 && num(t, p, "followers") == 1
	})
	release()
	released := time.Now()
	out := f.wait()
	if took := time.Since(released); took > 2*time.Second {
		t.Fatalf("the routes failed %s after the deploy did", took)
	}
	for i, r := range out {
		rs.pick(i).wantErr(r, http.StatusBadGateway, warmpool.CodeDeployFailed, "ErrImagePull")
		rs.pick(i+1).wantErr(rs.pick(i+1).do(http.MethodGet, fmt.Sprintf("/v1/scopes/fail/sessions/s%d", i), nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	}
	if n := rs.fake.DeployCount(); n != 1 {
		t.Fatalf("%d deploys: the follower must not take over", n)
	}
	if p := rs.b.pool("fail"); len(podsOf(p)) != 0 {
		t.Fatalf("pool after the failed deploy: %v", p)
	}
	rs.settle("fail")
	rs.clock.Advance(5 * time.Second)
	if b := rs.b.route("fail", "s9"); b["pod_id"] == "" || rs.fake.DeployCount() != 2 {
		t.Fatalf("route after the failure: %v", b)
	}
	rs.settle("fail")
}

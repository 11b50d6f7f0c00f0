package sweeper_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/invariant"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/scopes"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/sweeper"
)

// The managers' wake-up subscriptions and deploys are goroutines: every test must end
// them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is one replica's parts on one Redis and one fake driver, all on one
// controllable clock: the config store (SQLite in memory) and config service, the
// resource and session managers, and the sweeper whose jobs the tests call directly.
type harness struct {
	t       *testing.T
	r       *testredis.Redis
	store   *lua.Store
	fake    *fakepod.Driver
	clock   *testredis.Clock
	configs *sqlite.Store
	scopes  *scopes.Service
	rm      *rm.Manager
	sm      *sm.Manager
	sw      *sweeper.Sweeper
	cfg     sweeper.Config

	mu       sync.Mutex
	observed map[string]int
	versions map[string][]string // every deploy_ver a scope had, oldest first
}

// options shape a harness.
type options struct {
	sweep sweeper.Config
	sm    sm.Config
}

func newHarness(t *testing.T, opts ...func(*options)) *harness {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	ctx := context.Background()
	r := testredis.New(t)
	h := &harness{
		t: t, r: r, store: lua.NewStore(r.Client, r.Prefix), fake: fakepod.New(), clock: testredis.NewClock(),
		observed: map[string]int{}, versions: map[string][]string{},
	}
	configs, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = configs.Close() })
	h.configs = configs
	if _, err := h.store.Bootstrap(ctx, "e1"); err != nil {
		t.Fatal(err)
	}
	h.scopes = scopes.New(configs, h.store, nil)
	h.rm = rm.New(h.store, h.fake, rm.Config{Clock: h.clock})
	t.Cleanup(h.rm.Close)
	// Cleanups run last-in first-out: the fake fails held deploys before rm waits
	// for them.
	t.Cleanup(func() { _ = h.fake.Close() })
	o.sm.Clock = h.clock
	h.sm = sm.New(h.store, h.rm, o.sm)
	t.Cleanup(h.sm.Close)
	o.sweep.Clock = h.clock
	o.sweep.Observe = func(event, outcome string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.observed[event+"/"+outcome]++
	}
	h.sw = sweeper.New(h.store, h.rm, h.sm, h.fake, configs, o.sweep)
	h.cfg = o.sweep
	return h
}

// put stores and publishes (a new version of) a scope with max_concurrency mc and
// pod_concurrency pc; mutate adjusts the rest.
func (h *harness) put(scope string, mc, pc int, mutate ...func(*warmpool.ScopeConfig)) warmpool.StoredConfig {
	h.t.Helper()
	cfg := testredis.ScopeConfig(h.t, mc, pc, mutate...)
	stored, err := h.scopes.Put(context.Background(), scope, cfg)
	if err != nil {
		h.t.Fatalf("put %s: %v", scope, err)
	}
	h.mu.Lock()
	if v := h.versions[scope]; len(v) == 0 || v[len(v)-1] != stored.DeployVer {
		h.versions[scope] = append(v, stored.DeployVer)
	}
	h.mu.Unlock()
	return stored
}

// current is the scope's stored config.
func (h *harness) current(scope string) warmpool.StoredConfig {
	h.t.Helper()
	c, err := h.configs.Get(context.Background(), scope)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// client is a new client of the harness's Redis, as another replica would have.
func (h *harness) client() redis.UniversalClient {
	h.t.Helper()
	return h.r.NewClient(h.t)
}

// replica is another replica's session manager (own client, own rm.Manager) on the
// same Redis, driver and clock.
func (h *harness) replica() *sm.Manager {
	h.t.Helper()
	store := lua.NewStore(h.client(), h.r.Prefix)
	pool := rm.New(store, h.fake, rm.Config{Clock: h.clock})
	m := sm.New(store, pool, sm.Config{Clock: h.clock})
	h.t.Cleanup(func() {
		m.Close()
		pool.Close()
	})
	return m
}

func (h *harness) snap(scope string) lua.Snapshot {
	h.t.Helper()
	s, err := h.store.Snapshot(context.Background(), scope)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// check asserts the SPEC §6 invariants of a scope; settled also asserts that no
// work is in flight and nothing leaked.
func (h *harness) check(scope string, settled bool) lua.Snapshot {
	h.t.Helper()
	s := h.snap(scope)
	h.mu.Lock()
	vers := slices.Clone(h.versions[scope])
	h.mu.Unlock()
	for _, v := range invariant.Violations(s, h.current(scope).Config, vers, settled) {
		h.t.Errorf("%s: %s", scope, v)
	}
	return s
}

// observedCount is how often the sweeper reported event "sweep" with outcome.
func (h *harness) observedCount(outcome string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.observed["sweep/"+outcome]
}

// observedAll is a copy of everything the sweeper reported so far.
func (h *harness) observedAll() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.observed))
	for k, v := range h.observed {
		out[k] = v
	}
	return out
}

// addPod puts a ready pod of the scope's current version into the driver and
// registers it in Redis as idle since the clock's now, as reconcile adopts one.
func (h *harness) addPod(scope, id string, fence int64) warmpool.Pod {
	h.t.Helper()
	pod := h.externalPod(scope, id, fence)
	h.fake.AddExternal(pod)
	pod = h.driverPod(id)
	st, err := h.store.PodAdopt(context.Background(), pod, h.clock.Now())
	if err != nil || st != lua.AdoptAdopted {
		h.t.Fatalf("adopt %s: %q %v", id, st, err)
	}
	return pod
}

// externalPod is a pod of the scope's current version created at the clock's now.
func (h *harness) externalPod(scope, id string, fence int64) warmpool.Pod {
	return warmpool.Pod{ID: id, ScopeID: scope, DeployVer: h.current(scope).DeployVer, Fence: fence,
		CreatedAt: warmpool.UnixMs(h.clock.Now())}
}

// driverPod is the driver's view of a pod.
func (h *harness) driverPod(id string) warmpool.Pod {
	h.t.Helper()
	for _, p := range h.fake.Pods() {
		if p.ID == id {
			return p
		}
	}
	h.t.Fatalf("pod %s is not in the driver", id)
	return warmpool.Pod{}
}

func (h *harness) inDriver(id string) bool {
	for _, p := range h.fake.Pods() {
		if p.ID == id {
			return true
		}
	}
	return false
}

func (h *harness) deleted(id string) bool { return slices.Contains(h.fake.Deleted(), id) }

// autoscale runs the autoscale job, waits for the deploys it started, and returns
// how many it started.
func (h *harness) autoscale() int {
	h.t.Helper()
	before := h.observedCount("autoscale_deploy")
	if err := h.sw.Autoscale(context.Background()); err != nil {
		h.t.Fatalf("autoscale: %v", err)
	}
	h.waitDeploys()
	return h.observedCount("autoscale_deploy") - before
}

// waitDeploys waits until no deploy is in flight in the driver.
func (h *harness) waitDeploys() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ch := h.fake.Changed()
		if h.fake.InFlight() == 0 {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			h.t.Fatalf("deploys still in flight: %d", h.fake.InFlight())
		}
	}
	// The deploy registers its pod after the driver returned.
	waitFor(h.t, "deploy leases to go", func() bool {
		for _, id := range h.scopeIDs() {
			if len(h.snap(id).Deploys) > 0 {
				return false
			}
		}
		return true
	})
}

func (h *harness) scopeIDs() []string {
	h.t.Helper()
	ids, err := h.store.ScopeIDs(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *harness) route(scope, session string) sm.Binding {
	h.t.Helper()
	b, err := h.sm.Route(context.Background(), scope, session, "")
	if err != nil {
		h.t.Fatalf("route %s/%s: %v", scope, session, err)
	}
	return b
}

// reconcile runs the reconcile job, failing the test on an error.
func (h *harness) reconcile() {
	h.t.Helper()
	if err := h.sw.Reconcile(context.Background()); err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
}

// reconcileIsNoop runs reconcile on a consistent state and asserts that it changes
// nothing in Redis or in the driver and reports nothing.
func (h *harness) reconcileIsNoop(scopes ...string) {
	h.t.Helper()
	before := map[string]lua.Snapshot{}
	for _, s := range scopes {
		before[s] = h.snap(s)
	}
	seen, deleted, deploys := h.observedAll(), len(h.fake.Deleted()), h.fake.DeployCount()
	h.reconcile()
	for _, s := range scopes {
		if after := h.snap(s); !snapEqual(before[s], after) {
			h.t.Errorf("reconcile changed a consistent scope %s:\nbefore %+v\nafter  %+v", s, before[s], after)
		}
	}
	if now := h.observedAll(); !mapsEqual(seen, now) {
		h.t.Errorf("reconcile of a consistent state reported %v (before %v)", now, seen)
	}
	if d := h.fake.Deleted(); len(d) != deleted {
		h.t.Errorf("reconcile of a consistent state deleted %v", d[deleted:])
	}
	if h.fake.DeployCount() != deploys {
		h.t.Errorf("reconcile deployed")
	}
}

func snapEqual(a, b lua.Snapshot) bool {
	if len(a.Pods) != len(b.Pods) {
		return false
	}
	for i := range a.Pods {
		x, y := a.Pods[i], b.Pods[i]
		if x.Pod != y.Pod || x.Slots != y.Slots || x.Idle != y.Idle || !x.IdleSince.Equal(y.IdleSince) {
			return false
		}
	}
	return timesEqual(a.Deploys, b.Deploys) && timesEqual(a.Followers, b.Followers) && timesEqual(a.Claims, b.Claims) &&
		mapsEqual(a.ClaimPod, b.ClaimPod) && mapsEqual(a.Sessions, b.Sessions) && timesEqual(a.SessExp, b.SessExp) &&
		timesEqual(a.Waiters, b.Waiters) && a.Fence == b.Fence
}

func timesEqual(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}

func mapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// flush deletes every key of the harness (its prefix), as a Redis restart without
// persistence loses them; other tests on a shared redis-server keep theirs.
func (h *harness) flush() {
	h.t.Helper()
	if err := h.r.DeleteAll(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// passLease lets a PX lease of d on key run out: miniredis's time only moves when
// told; a real server's moves by itself.
func (h *harness) passLease(key string, d time.Duration) {
	h.t.Helper()
	if h.r.Mini != nil {
		h.r.Mini.FastForward(d)
	}
	waitFor(h.t, "lock "+key+" to expire", func() bool {
		n, err := h.r.Client.Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
}

// waitInFlight waits until n deploys are in flight in the driver, failing the test
// after 10 seconds.
func (h *harness) waitInFlight(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.fake.WaitInFlight(ctx, n); err != nil {
		h.t.Fatal(err)
	}
}

// recv takes a value from ch, failing the test after 10 seconds.
func recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func podIDs(s lua.Snapshot) []string {
	out := make([]string, 0, len(s.Pods))
	for _, p := range s.Pods {
		out = append(out, p.Pod.ID)
	}
	slices.Sort(out)
	return out
}

func idleIDs(s lua.Snapshot) []string {
	var out []string
	for _, p := range s.Pods {
		if p.Idle {
			out = append(out, p.Pod.ID)
		}
	}
	slices.Sort(out)
	return out
}

func podState(s lua.Snapshot, id string) (lua.PodState, bool) {
	for _, p := range s.Pods {
		if p.Pod.ID == id {
			return p, true
		}
	}
	return lua.PodState{}, false
}

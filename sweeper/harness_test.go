package sweeper_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/sweeper"
)

// The managers' wake-up subscriptions and deploys are goroutines: every test must end
// them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is the replicas' shared backing (one Redis, one fake driver, one clock, an
// SQLite config store in memory) and the replica under test: its managers and the
// sweeper whose jobs the tests call directly, all on the harness's clock.
type harness struct {
	*replicatest.Harness
	t *testing.T
	// client is the replica's connection to Redis, for hooks on the sweeper's calls.
	client redis.UniversalClient
	rm     *rm.Manager
	sm     *sm.Manager
	sw     *sweeper.Sweeper

	mu          sync.Mutex
	observedMap map[string]int
}

// options shape a harness.
type options struct {
	sweep sweeper.Config
	sm    sm.Config
	// driver, when set, makes the replica's driver of the harness's fake one.
	driver func(*fake.Driver) warmpool.PodDriver
}

func newHarness(t *testing.T, opts ...func(*options)) *harness {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	configs, err := sqlite.Open(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = configs.Close() })
	h := &harness{Harness: replicatest.New(t, replicatest.WithConfigs(configs)), t: t, observedMap: map[string]int{}}
	// The full pass runs flat out unless a test paces it.
	if o.sweep.PassDuty == 0 {
		o.sweep.PassDuty = 1
	}
	o.sweep.Observe = func(event, outcome string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.observedMap[event+"/"+outcome]++
	}
	var driver warmpool.PodDriver
	if o.driver != nil {
		driver = o.driver(h.Fake)
	}
	r := h.Replica(replicatest.Config{Clock: h.Clock, SM: o.sm, Sweeper: o.sweep, Driver: driver})
	h.client, h.rm, h.sm, h.sw = r.Client, r.RM, r.SM, r.Sweeper
	return h
}

// replica is another replica's session manager on the same Redis, driver and clock.
func (h *harness) replica() *sm.Manager {
	return h.Replica(replicatest.Config{Clock: h.Clock}).SM
}

// observedCount is how often the sweeper reported event "sweep" with outcome.
func (h *harness) observedCount(outcome string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.observedMap["sweep/"+outcome]
}

// observedAll is a copy of everything the sweeper reported so far.
func (h *harness) observedAll() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.observedMap)
}

// addPod puts a ready pod of the scope's current version into the driver and
// registers it in Redis as idle since the clock's now, as reconcile adopts one.
func (h *harness) addPod(scope, id string, fence int64) warmpool.Pod {
	h.t.Helper()
	pod := h.externalPod(scope, id, fence)
	h.Fake.AddExternal(pod)
	pod = h.driverPod(id)
	st, err := h.Store.PodAdopt(context.Background(), pod, h.Clock.Now(), false)
	if err != nil || st != redisstore.AdoptAdopted {
		h.t.Fatalf("adopt %s: %q %v", id, st, err)
	}
	return pod
}

// addGhost registers in Redis, idle since the clock's now, a ready pod of the scope's
// current version that the driver does not have.
func (h *harness) addGhost(scope, id string, fence int64) {
	h.t.Helper()
	pod := h.externalPod(scope, id, fence)
	pod.SSEURL = "http://fake.invalid/" + id + "/sse"
	if st, err := h.Store.PodAdopt(context.Background(), pod, h.Clock.Now(), false); err != nil || st != redisstore.AdoptAdopted {
		h.t.Fatalf("adopt %s: %q %v", id, st, err)
	}
}

// externalPod is a pod of the scope's current version created at the clock's now.
func (h *harness) externalPod(scope, id string, fence int64) warmpool.Pod {
	return warmpool.Pod{ID: id, ScopeID: scope, DeployVer: h.Current(scope).DeployVer, Fence: fence,
		CreatedAt: warmpool.UnixMs(h.Clock.Now())}
}

// driverPod is the driver's view of a pod.
func (h *harness) driverPod(id string) warmpool.Pod {
	h.t.Helper()
	for _, p := range h.Fake.Pods() {
		if p.ID == id {
			return p
		}
	}
	h.t.Fatalf("pod %s is not in the driver", id)
	return warmpool.Pod{}
}

func (h *harness) inDriver(id string) bool {
	for _, p := range h.Fake.Pods() {
		if p.ID == id {
			return true
		}
	}
	return false
}

func (h *harness) deleted(id string) bool { return slices.Contains(h.Fake.Deleted(), id) }

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

// staleLock leaves the lock of a job held by a holder that died, for lease; it
// returns the lock's key and when it was taken.
func (h *harness) staleLock(job string, lease time.Duration) (key string, taken time.Time) {
	h.t.Helper()
	key, taken = h.Store.Keys().Lock("sweep:"+job), time.Now()
	if err := h.Redis.Client.Set(context.Background(), key, "dead-holder", lease).Err(); err != nil {
		h.t.Fatal(err)
	}
	return key, taken
}

// waitDeploys waits until no deploy is in flight in the driver.
func (h *harness) waitDeploys() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ch := h.Fake.Changed()
		if h.Fake.InFlight() == 0 {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			h.t.Fatalf("deploys still in flight: %d", h.Fake.InFlight())
		}
	}
	// The deploy registers its pod after the driver returned.
	replicatest.WaitFor(h.t, "deploy leases to go", func() bool {
		for _, id := range h.scopeIDs() {
			if len(h.Snap(id).Deploys) > 0 {
				return false
			}
		}
		return true
	})
}

func (h *harness) scopeIDs() []string {
	h.t.Helper()
	ids, err := h.Store.ScopeIDs(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *harness) route(scope, session string) warmpool.Binding {
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
	before := map[string]redisstore.Snapshot{}
	for _, s := range scopes {
		before[s] = h.Snap(s)
	}
	seen, deleted, deploys := h.observedAll(), len(h.Fake.Deleted()), h.Fake.DeployCount()
	h.reconcile()
	for _, s := range scopes {
		if after := h.Snap(s); !snapEqual(before[s], after) {
			h.t.Errorf("reconcile changed a consistent scope %s:\nbefore %+v\nafter  %+v", s, before[s], after)
		}
	}
	if now := h.observedAll(); !maps.Equal(seen, now) {
		h.t.Errorf("reconcile of a consistent state reported %v (before %v)", now, seen)
	}
	if d := h.Fake.Deleted(); len(d) != deleted {
		h.t.Errorf("reconcile of a consistent state deleted %v", d[deleted:])
	}
	if h.Fake.DeployCount() != deploys {
		h.t.Errorf("reconcile deployed")
	}
}

func snapEqual(a, b redisstore.Snapshot) bool {
	if len(a.Pods) != len(b.Pods) {
		return false
	}
	for i := range a.Pods {
		x, y := a.Pods[i], b.Pods[i]
		if x.Pod != y.Pod || x.Slots != y.Slots || x.Idle != y.Idle || !x.IdleSince.Equal(y.IdleSince) {
			return false
		}
	}
	same := func(x, y map[string]time.Time) bool { return maps.EqualFunc(x, y, time.Time.Equal) }
	return same(a.Deploys, b.Deploys) && same(a.Followers, b.Followers) && same(a.Claims, b.Claims) &&
		maps.Equal(a.ClaimPod, b.ClaimPod) && maps.Equal(a.Sessions, b.Sessions) && same(a.SessExp, b.SessExp) &&
		same(a.Waiters, b.Waiters) && maps.Equal(a.Queue, b.Queue) && a.Fence == b.Fence
}

// flush deletes every key of the harness (its prefix), as a Redis restart without
// persistence loses them; other tests on a shared redis-server keep theirs.
func (h *harness) flush() {
	h.t.Helper()
	if err := h.Redis.DeleteAll(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// expireLease makes the lease on key run out now, as it would at its end.
func (h *harness) expireLease(key string) {
	h.t.Helper()
	if err := h.Redis.Client.PExpire(context.Background(), key, time.Millisecond).Err(); err != nil {
		h.t.Fatal(err)
	}
	h.passLease(key, time.Millisecond)
}

// passLease lets a PX lease of d on key run out: miniredis's time only moves when
// told; a real server's moves by itself.
func (h *harness) passLease(key string, d time.Duration) {
	h.t.Helper()
	if h.Redis.Mini != nil {
		h.Redis.Mini.FastForward(d)
	}
	replicatest.WaitFor(h.t, "lock "+key+" to expire", func() bool {
		n, err := h.Redis.Client.Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
}

func podIDs(s redisstore.Snapshot) []string {
	out := make([]string, 0, len(s.Pods))
	for _, p := range s.Pods {
		out = append(out, p.Pod.ID)
	}
	slices.Sort(out)
	return out
}

func idleIDs(s redisstore.Snapshot) []string {
	var out []string
	for _, p := range s.Pods {
		if p.Idle {
			out = append(out, p.Pod.ID)
		}
	}
	slices.Sort(out)
	return out
}

func podState(s redisstore.Snapshot, id string) (redisstore.PodState, bool) {
	for _, p := range s.Pods {
		if p.Pod.ID == id {
			return p, true
		}
	}
	return redisstore.PodState{}, false
}

package sweeper_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sweeper"
)

// ---- autoscale ----

// Autoscale deploys warm pods until min_idle_pods idle pods of the current version
// exist, counting its deploys in flight, and then does nothing more.
func TestAutoscaleFillsToMinIdle(t *testing.T) {
	h := newHarness(t)
	st := h.Scope("a", 6, 2, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 2 }) // max_pods 3

	release := h.Fake.Hold()
	if err := h.sw.Autoscale(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.WaitInFlight(2)
	// The warm deploys in flight count toward min_idle: a second run starts none.
	if err := h.sw.Autoscale(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := h.observedCount("autoscale_deploy"); n != 2 {
		t.Fatalf("autoscale started %d deploys while 2 were in flight, want 2 in all", n)
	}
	release()
	h.waitDeploys()

	s := h.Check("a", true)
	if len(s.Pods) != 2 || len(idleIDs(s)) != 2 {
		t.Fatalf("after autoscale: %d pods, idle %v; want 2 idle", len(s.Pods), idleIDs(s))
	}
	for _, p := range s.Pods {
		if p.Pod.DeployVer != st.DeployVer {
			t.Fatalf("warm pod %s of deploy_ver %s, want %s", p.Pod.ID, p.Pod.DeployVer, st.DeployVer)
		}
	}
	if n := h.autoscale(); n != 0 || h.Fake.DeployCount() != 2 {
		t.Fatalf("autoscale with enough idle pods started %d (deploys %d)", n, h.Fake.DeployCount())
	}
}

// Autoscale stays within max_pods and never takes an idle pod: it only adds pods.
func TestAutoscaleWithinMaxPodsNeverConsumesIdle(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 3, 1, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 2 }) // max_pods 3

	busy := h.route("a", "s1") // one busy pod, deployed for the route
	if n := h.autoscale(); n != 2 {
		t.Fatalf("autoscale started %d, want 2", n)
	}
	s := h.Check("a", true)
	if len(s.Pods) != 3 || len(idleIDs(s)) != 2 || slices.Contains(idleIDs(s), busy.PodID) {
		t.Fatalf("pods %v idle %v busy %s", podIDs(s), idleIDs(s), busy.PodID)
	}

	// A route takes one idle pod: 1 idle < min_idle, but the scope is at max_pods.
	h.route("a", "s2")
	before := h.Check("a", true)
	if n := h.autoscale(); n != 0 {
		t.Fatalf("autoscale at max_pods started %d deploys", n)
	}
	after := h.Check("a", true)
	if !snapEqual(before, after) || h.Fake.DeployCount() != 3 {
		t.Fatalf("autoscale at max_pods changed the pool:\nbefore %+v\nafter  %+v", before, after)
	}

	// The busy pod frees: 2 idle again, still nothing to do, and no idle pod is taken.
	if ok, err := h.sm.End(t.Context(), "a", "s1"); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	idle := idleIDs(h.Snap("a"))
	if n := h.autoscale(); n != 0 {
		t.Fatalf("autoscale started %d", n)
	}
	if got := idleIDs(h.Check("a", true)); !slices.Equal(got, idle) {
		t.Fatalf("idle pods %v became %v", idle, got)
	}
}

// Autoscale never has more than max_parallel_deploys deploys of a scope in flight.
func TestAutoscalePacedByParallelDeploys(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods, c.Pool.MaxParallelDeploys = 4, 2 }) // max_pods 4

	release := h.Fake.Hold()
	for range 3 {
		if err := h.sw.Autoscale(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitInFlight(2)
	if n, d := h.Fake.InFlight(), len(h.Snap("a").Deploys); n != 2 || d != 2 {
		t.Fatalf("in flight %d, leases %d; want 2 (max_parallel_deploys)", n, d)
	}
	release()
	h.waitDeploys()
	if got := len(idleIDs(h.Snap("a"))); got != 2 {
		t.Fatalf("idle %d, want 2", got)
	}
	if n := h.autoscale(); n != 2 {
		t.Fatalf("second round started %d, want 2", n)
	}
	if n := h.autoscale(); n != 0 {
		t.Fatalf("third round started %d, want 0", n)
	}
	if got := len(idleIDs(h.Check("a", true))); got != 4 {
		t.Fatalf("idle %d, want 4", got)
	}
	if h.Fake.DeployCount() != 4 || h.Fake.MaxOverlap() > 2 {
		t.Fatalf("deploys %d, most at once %d; want 4, at most 2", h.Fake.DeployCount(), h.Fake.MaxOverlap())
	}
}

// ---- reclaim ----

// Reclaim deletes idle pods once idle for pod_ttl_s, keeping the newest
// min_idle_pods, never a busy pod; idle pods of an old deploy_ver go on the next run
// whatever their age. Each is deleted in the driver and purged in Redis.
func TestReclaim(t *testing.T) {
	h := newHarness(t)
	pool := func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS, c.Pool.MinIdlePods, c.Pool.SessionTTLS = 60, 1, 86400 }
	h.Scope("a", 6, 1, pool)
	ctx := t.Context()

	busy := h.route("a", "s0").PodID
	h.addPod("a", "p1", 101) // idle since t0
	h.Clock.Advance(10 * time.Second)
	h.addPod("a", "p2", 102) // t0+10s
	h.Clock.Advance(10 * time.Second)
	h.addPod("a", "p3", 103) // t0+20s

	reclaim := func(wantDeleted ...string) {
		t.Helper()
		if err := h.sw.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
		if got := h.Fake.Deleted(); !slices.Equal(got, wantDeleted) {
			t.Fatalf("deleted %v, want %v", got, wantDeleted)
		}
		s := h.Check("a", true)
		for _, id := range wantDeleted {
			if _, ok := podState(s, id); ok || h.inDriver(id) {
				t.Fatalf("reclaimed pod %s still registered or in the driver", id)
			}
			for k, v := range map[string]string{"podver": h.Store.Keys().Scope("a").PodVer, "podinfo": h.Store.Keys().Scope("a").PodInfo, "slots": h.Store.Keys().Scope("a").Slots} {
				if ok, _ := h.Redis.Client.HExists(ctx, v, id).Result(); ok {
					t.Fatalf("reclaimed pod %s left in %s", id, k)
				}
			}
		}
		if n := h.observedCount("reclaimed"); n != len(wantDeleted) {
			t.Fatalf("observed %d reclaims, want %d", n, len(wantDeleted))
		}
	}

	h.Clock.Advance(39 * time.Second) // p1 idle 59s
	reclaim()
	h.Clock.Advance(time.Second) // p1 idle 60s
	reclaim("p1")
	h.Clock.Advance(20 * time.Second) // p2 idle 70s, p3 60s: p3 is the newest, kept
	reclaim("p1", "p2")
	h.Clock.Advance(time.Hour) // the last min_idle pod and the busy pod stay
	reclaim("p1", "p2")

	// A new deploy_ver: the old idle pod goes at once; the busy one keeps its session
	// and goes on the first run after it is idle.
	h.Scope("a", 6, 1, pool, func(c *warmpool.ScopeConfig) { c.Deploy.Image = "registry.example/agent:2" })
	reclaim("p1", "p2", "p3")
	if b, err := h.sm.Get(ctx, "a", "s0"); err != nil || b.PodID != busy {
		t.Fatalf("busy old pod's session: %+v %v", b, err)
	}
	if ok, err := h.sm.End(ctx, "a", "s0"); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	reclaim("p1", "p2", "p3", busy)
}

// A pod that gets a session between reclaim's snapshot and its purge is left alone:
// the purge re-checks atomically that the pod is idle since the time reclaim saw.
func TestReclaimSparesAPodThatJustGotASession(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS = 60 })
	ctx := t.Context()
	h.addPod("a", "p1", 101)
	h.Clock.Advance(time.Minute)

	// Another replica routes a session onto p1 just before reclaim's purge of it.
	other := h.replica()
	var fired atomic.Bool
	var bound warmpool.Binding
	var routeErr error
	h.client.AddHook(beforeScript{sha: redisstore.Scripts["pod_purge.lua"].Hash(), fn: func(args []any) {
		if !slices.Contains(args, any("p1")) || fired.Swap(true) {
			return
		}
		bound, routeErr = other.Route(ctx, "a", "late", "")
	}})
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if !fired.Load() || routeErr != nil || bound.PodID != "p1" {
		t.Fatalf("route before the purge: fired %v, %+v %v", fired.Load(), bound, routeErr)
	}
	if b, err := h.sm.Get(ctx, "a", "late"); err != nil || b.PodID != "p1" {
		t.Fatalf("session lost: %+v %v", b, err)
	}
	if h.deleted("p1") || h.observedCount("reclaimed") != 0 {
		t.Fatalf("p1 reclaimed under its session (deleted %v)", h.Fake.Deleted())
	}
	h.Check("a", true)

	// Idle again, but since a later time: a purge that saw the earlier idle time is
	// refused, and so is one for a pod that is busy.
	stale := h.Clock.Now().Add(-time.Minute)
	if _, err := h.Store.PodPurge(ctx, "a", "p1", "test", &stale); !errors.Is(err, redisstore.ErrPodBusy) {
		t.Fatalf("purge of a busy pod: %v, want ErrPodBusy", err)
	}
	h.Clock.Advance(time.Second)
	if ok, err := h.sm.End(ctx, "a", "late"); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	if _, err := h.Store.PodPurge(ctx, "a", "p1", "test", &stale); !errors.Is(err, redisstore.ErrPodBusy) {
		t.Fatalf("purge with a stale idle time: %v, want ErrPodBusy", err)
	}
	if p, ok := podState(h.Check("a", true), "p1"); !ok || !p.Idle {
		t.Fatalf("p1 after refused purges: %+v %v", p, ok)
	}
	// Its new idle time counts: reclaimed only a pod_ttl after it.
	if err := h.sw.Reclaim(ctx); err != nil || h.deleted("p1") {
		t.Fatalf("reclaimed before pod_ttl: %v", err)
	}
	h.Clock.Advance(time.Minute)
	if err := h.sw.Reclaim(ctx); err != nil || !h.deleted("p1") {
		t.Fatalf("not reclaimed after pod_ttl: %v (deleted %v)", err, h.Fake.Deleted())
	}
}

// Many routes land on idle pods while reclaim runs in a loop with every idle pod past
// pod_ttl: no session is ever left on a purged or deleted pod.
func TestReclaimRacesRoutes(t *testing.T) {
	h := newHarness(t)
	// One session a pod, so that the routes spread over every idle pod.
	h.Scope("a", 24, 1, func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS, c.Pool.QueueSize = 1, 16 })
	ctx := t.Context()
	replicas := []*sm.Manager{h.sm, h.replica(), h.replica()}
	// The routes of a round start at reclaim's first purge, when it has a snapshot
	// of idle pods and is about to purge them one by one; each purge is delayed a
	// little to widen the window the routes race in (fault injection, not
	// synchronisation: the test holds with any timing).
	var gate atomic.Pointer[func()]
	h.client.AddHook(beforeScript{sha: redisstore.Scripts["pod_purge.lua"].Hash(), fn: func([]any) {
		if open := gate.Load(); open != nil {
			(*open)()
		}
		time.Sleep(200 * time.Microsecond)
	}})
	const rounds, routes = 8, 8
	type routed struct {
		session string
		b       warmpool.Binding
		err     error
	}
	for round := range rounds {
		for i := range routes {
			h.addPod("a", fmt.Sprintf("r%d-p%d", round, i), int64(100+round*routes+i))
		}
		h.Clock.Advance(2 * time.Second) // every idle pod is past pod_ttl
		start, stop := make(chan struct{}), make(chan struct{})
		open := sync.OnceFunc(func() { close(start) })
		gate.Store(&open)
		var loop sync.WaitGroup
		loop.Add(1)
		go func() {
			defer loop.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := h.sw.Reclaim(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		out := make(chan routed, routes)
		for i := range routes {
			go func() {
				<-start
				id := fmt.Sprintf("r%d-s%d", round, i)
				b, err := replicas[i%len(replicas)].Route(ctx, "a", id, "")
				out <- routed{id, b, err}
			}()
		}
		select {
		case <-start:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: reclaim purged nothing", round)
		}
		var got []routed
		for range routes {
			got = append(got, replicatest.Recv(t, "a route", out))
		}
		close(stop)
		loop.Wait()

		s := h.Check("a", true)
		for _, r := range got {
			if r.err != nil {
				t.Fatalf("round %d: route %s: %v", round, r.session, r.err)
			}
			if h.deleted(r.b.PodID) {
				t.Fatalf("round %d: pod %s was deleted after session %s landed on it", round, r.b.PodID, r.session)
			}
			if b, err := h.sm.Get(ctx, "a", r.session); err != nil || b.PodID != r.b.PodID {
				t.Fatalf("round %d: session %s routed to %s is now %+v %v", round, r.session, r.b.PodID, b, err)
			}
			if _, ok := podState(s, r.b.PodID); !ok {
				t.Fatalf("round %d: session %s on purged pod %s", round, r.session, r.b.PodID)
			}
		}
		// The sessions end: their pods go idle, to be raced over again next round.
		for _, r := range got {
			if ok, err := replicas[0].End(ctx, "a", r.session); !ok || err != nil {
				t.Fatalf("end %s: %v %v", r.session, ok, err)
			}
		}
		h.Check("a", true)
	}
	t.Logf("%d reclaims, %d deploys", h.observedCount("reclaimed"), h.Fake.DeployCount())
	if h.observedCount("reclaimed") == 0 {
		t.Fatal("reclaim never ran into an idle pod: the test raced nothing")
	}
}

// beforeScript runs fn (with the script's keys and args) before every call of the
// script with the given SHA1, on the client it hooks.
type beforeScript struct {
	sha string
	fn  func(args []any)
}

func (b beforeScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b beforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b.matches(cmd.Args()) {
			b.fn(cmd.Args()[3:])
		}
		return next(ctx, cmd)
	}
}

func (b beforeScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (b beforeScript) matches(args []any) bool {
	if len(args) < 3 {
		return false
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha":
		return body == b.sha
	case "eval":
		sum := sha1.Sum([]byte(body))
		return hex.EncodeToString(sum[:]) == b.sha
	}
	return false
}

// ---- watch ----

// A pod the driver reports dead is purged and deleted; its sessions are released and
// the gateway finds out on its next touch.
func TestWatchBuriesDeadPods(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2)
	ctx := t.Context()
	dead := h.route("a", "s1").PodID
	h.addPod("a", "p2", 102)
	if err := h.sw.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.observedAll()) != 0 || len(h.Snap("a").Pods) != 2 {
		t.Fatalf("watch of healthy pods did something: %v", h.observedAll())
	}

	h.Fake.Kill(dead, "OOMKilled")
	if err := h.sw.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	s := h.Check("a", true)
	if _, ok := podState(s, dead); ok || !h.deleted(dead) || h.inDriver(dead) {
		t.Fatalf("dead pod %s: registered %v, deleted %v", dead, ok, h.Fake.Deleted())
	}
	if _, ok := podState(s, "p2"); !ok || h.deleted("p2") {
		t.Fatal("a healthy pod was buried")
	}
	if touched, err := h.sm.Touch(ctx, "a", "s1"); touched || err != nil {
		t.Fatalf("touch of a session on a dead pod: %v %v, want false", touched, err)
	}
	if _, err := h.sm.Get(ctx, "a", "s1"); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		t.Fatalf("get of a session on a dead pod: %v, want SESSION_NOT_FOUND", err)
	}
	if n := h.observedCount("dead"); n != 1 {
		t.Fatalf("observed %d dead, want 1", n)
	}
	// The session routes again, onto a live pod.
	if b := h.route("a", "s1"); b.PodID == dead || !b.New {
		t.Fatalf("route after the burial: %+v", b)
	}
}

// A config store that does not answer does not stop the watch: the refresh of the
// probe periods fails, and a dead pod is still buried.
func TestWatchWithoutTheConfigStore(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2)
	dead := h.route("a", "s1").PodID
	if err := h.Configs.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Configs.List(t.Context()); err == nil {
		t.Fatal("the closed config store still lists")
	}
	h.Fake.Kill(dead, "OOMKilled")
	if err := h.sw.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := podState(h.Check("a", true), dead); ok || !h.deleted(dead) {
		t.Fatalf("dead pod %s: registered %v, deleted %v", dead, ok, h.Fake.Deleted())
	}
}

// A pod whose probe fails is buried after exactly HealthFailThreshold failed watch
// runs in a row; a passing probe starts the count again.
func TestWatchBuriesUnhealthyAfterThreshold(t *testing.T) {
	for _, threshold := range []int{0, 1, 4} { // 0: the default
		t.Run(fmt.Sprintf("threshold_%d", threshold), func(t *testing.T) {
			h := newHarness(t, func(o *options) { o.sweep.HealthFailThreshold = threshold })
			want := threshold
			if want == 0 {
				want = sweeper.DefaultHealthFailThreshold
			}
			h.Scope("a", 4, 2)
			ctx := t.Context()
			h.addPod("a", "p1", 101)
			h.addPod("a", "p2", 102)
			h.route("a", "s1") // on p1
			// One probe period on: each pod is probed once.
			watch := func() {
				t.Helper()
				h.Clock.Advance(warmpool.DefaultProbePeriodS * time.Second)
				if err := h.sw.Watch(ctx); err != nil {
					t.Fatal(err)
				}
			}
			alive := func(id string) bool {
				_, ok := podState(h.Snap("a"), id)
				return ok && !h.deleted(id)
			}
			unhealthy := errors.New("health: 503")

			// p2 fails want-1 times, passes once, fails want-1 times again: kept.
			h.Fake.SetProbe("p2", unhealthy)
			for range want - 1 {
				watch()
			}
			h.Fake.SetProbe("p2", nil)
			watch()
			h.Fake.SetProbe("p2", unhealthy)
			for range want - 1 {
				watch()
			}
			if !alive("p2") {
				t.Fatal("p2 buried although its failures were not consecutive")
			}

			// p1 fails want times in a row: kept until the last of them.
			h.Fake.SetProbe("p1", unhealthy)
			for i := range want {
				if !alive("p1") {
					t.Fatalf("p1 buried after %d failed probes, threshold %d", i, want)
				}
				watch()
			}
			if alive("p1") || alive("p2") {
				t.Fatalf("after %d failures in a row: p1 alive %v, p2 alive %v", want, alive("p1"), alive("p2"))
			}
			if touched, err := h.sm.Touch(ctx, "a", "s1"); touched || err != nil {
				t.Fatalf("touch of a session on a buried pod: %v %v", touched, err)
			}
			if n := h.observedCount("unhealthy"); n != 2 {
				t.Fatalf("observed %d unhealthy burials, want 2", n)
			}
			h.Check("a", true)
		})
	}
}

// A registered pod that leaves the driver's list is buried at the next watch, also
// with a driver that reports no deaths; one the driver never listed is left to the full
// pass (TestReconcilePurgesGhosts): watch reads no scope's pool.
func TestWatchBuriesPodGoneFromTheList(t *testing.T) {
	h := newHarness(t, func(o *options) {
		o.driver = func(f *fake.Driver) warmpool.PodDriver { return silentDriver{f} }
	})
	h.Scope("a", 4, 2)
	ctx := t.Context()
	h.addPod("a", "p1", 1)
	h.addGhost("a", "ghost", 7)
	h.route("a", "s1") // on p1
	if err := h.sw.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Hour)
	if err := h.Fake.Delete(ctx, h.driverPod("p1")); err != nil { // behind the sweeper's back
		t.Fatal(err)
	}
	if err := h.sw.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	s := h.Check("a", true)
	if _, ok := podState(s, "p1"); ok || h.observedCount("dead") != 1 {
		t.Fatalf("p1 left the list and is still registered (observed %v)", h.observedAll())
	}
	if touched, _ := h.sm.Touch(ctx, "a", "s1"); touched {
		t.Fatal("the session of the pod that left is still live")
	}
	if _, ok := podState(s, "ghost"); !ok {
		t.Fatal("watch purged a pod the driver never listed: it read the pool")
	}
}

// silentDriver is the harness's fake driver without its death reports: the sweeper
// learns of deaths from its list alone.
type silentDriver struct{ warmpool.PodDriver }

// ---- reconcile ----

// Pods the driver has and Redis does not: a ready one of the current version is
// adopted as idle; one of an old version, a dead one, one of a scope without config,
// and one never ready within OrphanGrace are deleted; the pod of a live deploy lease
// is left to its leader.
func TestReconcileOrphansInTheDriver(t *testing.T) {
	h := newHarness(t)
	st := h.Scope("a", 8, 2) // max_pods 4
	ctx := t.Context()

	// A deploy lease in flight (its leader is about to register its pod).
	now := h.Clock.Now()
	lease, err := h.Store.PodAcquire(ctx, "a", redisstore.AcquireArgs{Now: now, Claim: "c1", ClaimDeadline: now.Add(30 * time.Second),
		LeaseDeadline: now.Add(30 * time.Second), RoomMargin: time.Second})
	if err != nil || lease.Kind != redisstore.AcquireDeploy {
		t.Fatal(lease, err)
	}
	leased := h.externalPod("a", warmpool.PodName("a", lease.Fence), lease.Fence)
	h.Fake.AddExternal(leased)

	h.Fake.AddExternal(h.externalPod("a", "adopt-me", 50))
	old := h.externalPod("a", "old", 51)
	old.DeployVer = "0123456789abcdef"
	h.Fake.AddExternal(old)
	dead := h.externalPod("a", "dead", 52)
	dead.Dead = "Evicted"
	h.Fake.AddExternal(dead)
	noScope := h.externalPod("a", "no-scope", 53)
	noScope.ScopeID = "gone"
	h.Fake.AddExternal(noScope)

	// A pod still starting: the driver has it, not ready, created now (wall clock).
	release := h.Fake.Hold()
	starting := make(chan error, 1)
	go func() {
		_, err := h.Fake.Deploy(context.Background(), warmpool.DeployRequest{ScopeID: "a", DeployVer: st.DeployVer, Fence: 60, Spec: st.Config.Deploy})
		starting <- err
	}()
	h.WaitInFlight(1)
	startingID := warmpool.PodName("a", 60)

	h.reconcile()
	s := h.Check("a", false)
	if p, ok := podState(s, "adopt-me"); !ok || !p.Idle || p.Slots != 0 || p.Pod.DeployVer != st.DeployVer || p.Pod.SSEURL == "" {
		t.Fatalf("ready current orphan not adopted as idle: %+v %v", p, ok)
	}
	for _, id := range []string{"old", "dead"} {
		if !h.deleted(id) || h.inDriver(id) {
			t.Fatalf("orphan %s not deleted (deleted %v)", id, h.Fake.Deleted())
		}
	}
	for _, id := range []string{leased.ID, startingID, "no-scope"} {
		if h.deleted(id) {
			t.Fatalf("pod %s deleted within its grace or under a live lease", id)
		}
		if _, ok := podState(s, id); ok {
			t.Fatalf("pod %s adopted", id)
		}
	}
	if a, d := h.observedCount("adopted"), h.observedCount("deleted_orphan"); a != 1 || d != 2 {
		t.Fatalf("observed %d adopted, %d deleted; want 1, 2", a, d)
	}
	// The adopted pod is routable.
	if b := h.route("a", "s1"); b.PodID != "adopt-me" || h.Fake.DeployCount() != 1 {
		t.Fatalf("route after adoption: %+v (deploys %d)", b, h.Fake.DeployCount())
	}

	// Past OrphanGrace (the clock jumps past the driver's wall-clock creation time):
	// the pod that never became ready and the scope-less one go. The deploy lease has
	// expired by then (its leader is gone), so its ready pod is adopted.
	h.Clock.Advance(time.Since(h.Clock.Now()) + sweeper.DefaultOrphanGrace + time.Second)
	h.reconcile()
	for _, id := range []string{startingID, "no-scope"} {
		if !h.deleted(id) || h.inDriver(id) {
			t.Fatalf("orphan %s not deleted after the grace (deleted %v)", id, h.Fake.Deleted())
		}
	}
	s = h.Check("a", false)
	if p, ok := podState(s, leased.ID); !ok || !p.Idle {
		t.Fatalf("the pod of an expired lease was not adopted in the same reconcile: %+v %v", p, ok)
	}
	release()
	if err := replicatest.Recv(t, "the held deploy", starting); warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
		t.Fatalf("deploy of the deleted pod: %v", err)
	}
	h.reconcileIsNoop("a")
}

// A pod registered in Redis whose driver pod vanished (never listed dead) is purged
// after GhostGrace, with its sessions.
func TestReconcilePurgesGhosts(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2)
	ctx := t.Context()
	h.addGhost("a", "ghost", 7)
	h.route("a", "s1")
	h.Clock.Advance(sweeper.DefaultGhostGrace - time.Millisecond)
	h.reconcile()
	if _, ok := podState(h.Snap("a"), "ghost"); !ok || h.observedCount("purged_ghost") != 0 {
		t.Fatal("ghost purged within the grace")
	}
	h.Clock.Advance(time.Millisecond)
	h.reconcile()
	s := h.Check("a", true)
	if _, ok := podState(s, "ghost"); ok || len(s.Sessions) != 0 || h.observedCount("purged_ghost") != 1 {
		t.Fatalf("ghost not purged: %+v, observed %v", s, h.observedAll())
	}
	if touched, _ := h.sm.Touch(ctx, "a", "s1"); touched {
		t.Fatal("the ghost's session is still live")
	}
	h.reconcileIsNoop("a")
}

// Crash leftovers past their deadlines go: a deploy lease whose leader died, its
// follower's room entry, a claim never bound, a waiter that never left. The claimed
// pod is idle again.
func TestReconcileRemovesStaleLeftovers(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.WaitTimeoutS = 10 })
	ctx := t.Context()
	h.addPod("a", "p1", 101)
	now := h.Clock.Now()
	args := func(claim string) redisstore.AcquireArgs {
		return redisstore.AcquireArgs{Now: now, Claim: claim, ClaimDeadline: now.Add(5 * time.Second),
			LeaseDeadline: now.Add(5 * time.Second), RoomMargin: time.Second}
	}
	for _, step := range []struct{ claim, want string }{
		{"c-warm", redisstore.AcquireWarm}, {"c-lead", redisstore.AcquireDeploy}, {"c-follow", redisstore.AcquireFollower},
	} {
		res, err := h.Store.PodAcquire(ctx, "a", args(step.claim))
		if err != nil || res.Kind != step.want {
			t.Fatalf("acquire %s: %+v %v, want %s", step.claim, res, err, step.want)
		}
	}
	// A waiter of a replica that died: queued, never served, never left.
	k := h.Store.Keys().Scope("a")
	if err := h.Redis.Client.ZAdd(ctx, k.Waiters, redis.Z{Score: float64(now.Add(10 * time.Second).UnixMilli()), Member: "w1"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Redis.Client.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: "w1"}).Err(); err != nil {
		t.Fatal(err)
	}
	s := h.Snap("a")
	if len(s.Deploys) != 1 || len(s.Followers) != 1 || len(s.Claims) != 1 || len(s.Waiters) != 1 || len(s.Queue) != 1 || len(idleIDs(s)) != 0 {
		t.Fatalf("leftovers not set up: %+v", s)
	}

	// Before their deadlines nothing goes (but the fencing counter is raised past p1's
	// number).
	h.reconcile()
	s.Fence = 101
	if !snapEqual(s, h.Snap("a")) {
		t.Fatalf("reconcile removed live work:\nbefore %+v\nafter  %+v", s, h.Snap("a"))
	}
	// After every deadline (the room's is the ready timeout plus the margin).
	h.Clock.Advance(12 * time.Second)
	h.reconcile()
	s = h.Check("a", true)
	if len(s.Deploys)+len(s.Followers)+len(s.Waiters)+len(s.Queue) != 0 {
		t.Fatalf("leftovers survived a reconcile: %+v", s)
	}
	if p, ok := podState(s, "p1"); !ok || !p.Idle || p.Slots != 0 {
		t.Fatalf("the stale claim's pod is not idle: %+v", p)
	}
	if h.observedCount("repaired") != 1 {
		t.Fatalf("observed %v", h.observedAll())
	}
	h.reconcileIsNoop("a")
}

// Slot counts corrupted by hand are recomputed from the sessions and claims.
func TestReconcileRecountsSlots(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 6, 2)
	ctx := t.Context()
	for i, id := range []string{"p1", "p2", "p3"} {
		h.addPod("a", id, int64(101+i))
	}
	// First fit, in registration order (then by id): s1, s2 on p1 (full), s3 on p2.
	for _, s := range []string{"s1", "s2", "s3"} {
		h.route("a", s)
	}
	per := map[string]int{}
	for _, pod := range h.Snap("a").Sessions {
		per[pod]++
	}
	if per["p1"] != 2 || per["p2"] != 1 || per["p3"] != 0 {
		t.Fatalf("sessions per pod: %v", per)
	}
	slots := h.Store.Keys().Scope("a").Slots
	for pod, n := range map[string]int{
		"p1":    1, // too few: a third session would fit on a full pod
		"p2":    2, // too many: capacity lost
		"p3":    1, // an idle pod with a phantom slot
		"stray": 1, // a pod that is not registered
	} {
		if err := h.Redis.Client.HSet(ctx, slots, pod, n).Err(); err != nil {
			t.Fatal(err)
		}
	}

	h.reconcile()
	s := h.Check("a", true)
	for id, want := range map[string]int{"p1": 2, "p2": 1, "p3": 0} {
		if p, _ := podState(s, id); p.Slots != want {
			t.Fatalf("pod %s: %d slots after reconcile, want %d", id, p.Slots, want)
		}
	}
	if p, _ := podState(s, "p3"); !p.Idle {
		t.Fatal("the idle pod is no longer idle")
	}
	if ok, _ := h.Redis.Client.HExists(ctx, slots, "stray").Result(); ok {
		t.Fatal("stray slot count kept")
	}
	if h.observedCount("repaired") != 1 {
		t.Fatalf("observed %v", h.observedAll())
	}
	// The recount is what routing sees: s4 fits on p2, not on the full p1.
	if b := h.route("a", "s4"); b.PodID != "p2" {
		t.Fatalf("s4 routed to %s, want p2", b.PodID)
	}
	h.Check("a", true)
	h.reconcileIsNoop("a")
}

// A stale job lock left by a dead holder expires by its lease; then a runner runs
// the job.
func TestReconcileAfterAStaleLock(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2)
	ctx := t.Context()
	h.Fake.AddExternal(h.externalPod("a", "orphan", 9))
	const lease = 300 * time.Millisecond
	key, set := h.staleLock("reconcile", lease)
	runner := sweeper.NewRunner(h.Store, nil, lease, nil)
	if runOnce(t, runner, ctx, h.sw.ReconcileJob()) {
		// A real server's clock runs: under load the lease may have run out already,
		// and only then may the job run.
		if since := time.Since(set); since < lease {
			t.Fatalf("reconcile ran %s into another holder's %s lease", since, lease)
		}
	} else {
		if _, ok := podState(h.Snap("a"), "orphan"); ok {
			t.Fatal("orphan adopted by a job that did not hold its lock")
		}
		h.passLease(key, lease)
		if !runOnce(t, runner, ctx, h.sw.ReconcileJob()) {
			t.Fatal("reconcile did not run after the stale lock expired")
		}
	}
	if _, ok := podState(h.Check("a", true), "orphan"); !ok {
		t.Fatal("reconcile ran but did not adopt the orphan")
	}
	if n, _ := h.Redis.Client.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the runner did not release its lock")
	}
}

// Reconcile of a consistent state changes nothing and reports nothing.
func TestReconcileIsNoopWhenConsistent(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 1 })
	h.Scope("b", 4, 1)
	for _, s := range []string{"s1", "s2", "s3"} {
		h.route("a", s)
	}
	h.route("b", "s1")
	h.autoscale()
	if ok, err := h.sm.End(t.Context(), "a", "s3"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Check("a", true)
	h.Check("b", true)
	h.reconcileIsNoop("a", "b")
	h.reconcileIsNoop("a", "b")
}

// ---- Redis data loss ----

// Redis loses every key under a running system: requests fail closed, nothing scales
// down, and one reconcile rebuilds the pool from the driver (same pods, scopes and
// versions, all idle) with the fencing counters raised past every live pod's number.
func TestRedisDataLossRebuild(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.Scope("a", 4, 2)                                                                  // max_pods 2
	stB := h.Scope("b", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 1 }) // max_pods 4
	for _, s := range []string{"s1", "s2", "s3"} {
		h.route("a", s)
	}
	h.route("b", "s1")
	h.autoscale()
	before := map[string][]string{"a": podIDs(h.Check("a", true)), "b": podIDs(h.Check("b", true))}
	if len(before["a"]) != 2 || len(before["b"]) != 2 {
		t.Fatalf("pods before the loss: %v", before)
	}
	deploys, deleted := h.Fake.DeployCount(), len(h.Fake.Deleted())

	h.flush()
	if _, err := h.sm.Route(ctx, "a", "s9", ""); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("route after the loss: %v, want STORE_UNAVAILABLE", err)
	}
	if _, err := h.sm.Touch(ctx, "a", "s1"); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("touch after the loss: %v, want STORE_UNAVAILABLE", err)
	}
	if _, err := h.rm.Acquire(ctx, "b"); warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("acquire after the loss: %v, want STORE_UNAVAILABLE", err)
	}
	// Nothing scales down (or up) on missing data.
	h.Clock.Advance(time.Hour)
	for name, job := range map[string]func(context.Context) error{"autoscale": h.sw.Autoscale, "reclaim": h.sw.Reclaim, "watch": h.sw.Watch, "sessions": h.sw.ExpireSessions} {
		_ = job(ctx) // failing is fine; acting is not
		if h.Fake.DeployCount() != deploys || len(h.Fake.Deleted()) != deleted {
			t.Fatalf("%s acted on a keyspace that lost its data", name)
		}
	}

	h.reconcile()
	if h.observedCount("rebuilt") != 1 {
		t.Fatalf("observed %v", h.observedAll())
	}
	for scope, pods := range before {
		s := h.Check(scope, false)
		if got := podIDs(s); !slices.Equal(got, pods) {
			t.Fatalf("%s: pods after the rebuild %v, want %v", scope, got, pods)
		}
		pc := h.Current(scope).Config.Pool.PodConcurrency
		for _, p := range s.Pods {
			// Its sessions were lost with the data: every slot stays taken for now.
			if p.Idle || p.Slots != pc || p.Claims != pc || p.Pod.ScopeID != scope || p.Pod.DeployVer != h.Current(scope).DeployVer || p.Pod.SSEURL == "" {
				t.Fatalf("%s: restored pod %+v", scope, p)
			}
			if s.Fence < p.Pod.Fence {
				t.Fatalf("%s: fence %d below live pod %s's %d", scope, s.Fence, p.Pod.ID, p.Pod.Fence)
			}
		}
	}
	// A new session needs a new deploy meanwhile: it gets a new number, not a live
	// pod's name.
	nb := h.route("b", "x-new")
	if slices.Contains(before["b"], nb.PodID) || nb.DeployVer != stB.DeployVer || h.Fake.DeployCount() != deploys+1 {
		t.Fatalf("new deploy after the rebuild: %+v (deploys %d)", nb, h.Fake.DeployCount())
	}
	// Once session_ttl_s has passed, the expiry job frees the restored pods: routing
	// works on them without a deploy.
	h.Clock.Advance(time.Duration(warmpool.DefaultSessionTTLS) * time.Second)
	if err := h.sw.ExpireSessions(ctx); err != nil {
		t.Fatal(err)
	}
	b := h.route("a", "s9")
	if !slices.Contains(before["a"], b.PodID) || h.Fake.DeployCount() != deploys+1 {
		t.Fatalf("route after the rebuild: %+v (deploys %d, were %d)", b, h.Fake.DeployCount(), deploys+1)
	}
	for i := range 2 * len(before["b"]) {
		if b := h.route("b", fmt.Sprintf("x%d", i)); !slices.Contains(before["b"], b.PodID) {
			t.Fatalf("route x%d deployed although restored pods had room: %+v", i, b)
		}
	}
	h.Check("a", true)
	h.Check("b", true)
	h.reconcileIsNoop("a", "b")
}

// Issue 12.6: after Redis lost its data, adopted pods are not over-committed. Five
// pods serve ten conversations (pod_concurrency 2) when Redis restarts empty; the
// rebuild adopts them, but their sessions are unknown and may still run, so none of
// ten new sessions is placed on them until session_ttl_s has passed since the
// adoption (the scope is at max_pods, so the new sessions find no room meanwhile).
// Before, all ten were placed on the adopted pods: four sessions a pod against
// pod_concurrency 2. After the TTL, the expiry job frees the slots and the pods serve
// again, within pod_concurrency.
func TestAdoptedPodsAreNotOverCommitted(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.Scope("a", 10, 2, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize = 0 }) // max_pods 5
	for i := range 10 {
		h.route("a", fmt.Sprintf("old%d", i))
	}
	pods := podIDs(h.Check("a", true))
	if len(pods) != 5 {
		t.Fatalf("pods before the loss: %v", pods)
	}
	h.flush()
	h.reconcile()
	placed := 0
	for i := range 10 {
		b, err := h.sm.Route(ctx, "a", fmt.Sprintf("new%d", i), "")
		switch {
		case err == nil && slices.Contains(pods, b.PodID):
			placed++
		case err == nil:
			t.Fatalf("new%d on %s, not an adopted pod: the scope is at max_pods", i, b.PodID)
		case warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable:
			t.Fatalf("new%d: %v", i, err)
		}
	}
	if placed > 0 {
		t.Fatalf("%d of 10 new sessions placed on adopted pods that may still serve 10 old ones", placed)
	}
	s := h.Check("a", false)
	if len(s.Sessions) != 0 {
		t.Fatalf("sessions bound while the adopted pods are held: %v", s.Sessions)
	}

	// Not yet one TTL after the adoption: still held.
	ttl := time.Duration(h.Current("a").Config.Pool.SessionTTLS) * time.Second
	h.Clock.Advance(ttl - time.Second)
	if err := h.sw.ExpireSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sm.Route(ctx, "a", "early", ""); warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable {
		t.Fatalf("route before session_ttl_s passed: %v, want NO_POD_AVAILABLE", err)
	}
	h.Clock.Advance(time.Second)
	if err := h.sw.ExpireSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if idle := idleIDs(h.Check("a", true)); !slices.Equal(idle, pods) {
		t.Fatalf("idle after session_ttl_s: %v, want every adopted pod %v", idle, pods)
	}
	for i := range 10 {
		if b := h.route("a", fmt.Sprintf("late%d", i)); !slices.Contains(pods, b.PodID) {
			t.Fatalf("late%d on %s, want an adopted pod", i, b.PodID)
		}
	}
	h.Check("a", true)
}

// A scope whose keys alone were lost (a Redis Cluster node restarted empty while the
// global epoch lives on another) is published again by reconcile, and its pods, which
// Redis no longer knows, are adopted with their sessions unknown: every slot held.
func TestOrphansOfALostScopeAreHeld(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.Scope("a", 4, 2)
	pod := h.route("a", "s1").PodID
	err := h.Redis.ForEachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, h.Redis.Prefix+"{a}:*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	s := h.Check("a", false)
	if len(s.Pods) != 1 || s.Pods[0].Pod.ID != pod || s.Pods[0].Idle || s.Pods[0].Claims != 2 {
		t.Fatalf("pods after reconcile: %+v; want %s adopted with both slots held", s.Pods, pod)
	}
	if b := h.route("a", "s2"); b.PodID == pod {
		t.Fatalf("a new session went to %s, whose sessions are unknown", pod)
	}
}

// ---- session expiry ----

// Sessions past session_ttl_s are evicted, their slots freed and a waiter woken;
// live sessions stay.
func TestExpireSessions(t *testing.T) {
	// Waiters only re-check on wake-ups within the test's time: the expiry job must
	// wake them.
	h := newHarness(t, func(o *options) {
		o.sm.Recheck = time.Hour
		o.sweep.ExpiryBatch = 1
	})
	h.Scope("a", 3, 1, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS, c.Pool.WaitTimeoutS = 60, 120 }) // max_pods 3; the wait outlasts the clock jumps
	ctx := t.Context()
	p1, p2 := h.route("a", "s1").PodID, h.route("a", "s2").PodID
	h.Clock.Advance(30 * time.Second)
	p3 := h.route("a", "s3").PodID

	type routed struct {
		b   warmpool.Binding
		err error
	}
	waiter := make(chan routed, 1)
	go func() {
		b, err := h.sm.Route(context.Background(), "a", "s4", "")
		waiter <- routed{b, err}
	}()
	replicatest.WaitFor(t, "s4 to queue", func() bool { return len(h.Snap("a").Waiters) == 1 })

	if err := h.sw.ExpireSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.Snap("a").Sessions) != 3 || h.observedCount("sessions_expired") != 0 {
		t.Fatal("live sessions evicted")
	}
	h.Clock.Advance(31 * time.Second) // s1 and s2 expired, s3 not
	if err := h.sw.ExpireSessions(ctx); err != nil {
		t.Fatal(err)
	}
	var r routed
	select {
	case r = <-waiter:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if r.err != nil || (r.b.PodID != p1 && r.b.PodID != p2) || h.Fake.DeployCount() != 3 {
		t.Fatalf("woken waiter: %+v %v (deploys %d)", r.b, r.err, h.Fake.DeployCount())
	}
	if h.observedCount("sessions_expired") == 0 {
		t.Fatalf("expiry not reported: %v", h.observedAll())
	}
	for sess, want := range map[string]bool{"s1": false, "s2": false, "s3": true, "s4": true} {
		if touched, err := h.sm.Touch(ctx, "a", sess); touched != want || err != nil {
			t.Fatalf("touch %s: %v %v, want %v", sess, touched, err, want)
		}
	}
	s := h.Check("a", true)
	freed := p1
	if r.b.PodID == p1 {
		freed = p2
	}
	for id, want := range map[string]int{freed: 0, r.b.PodID: 1, p3: 1} {
		if p, _ := podState(s, id); p.Slots != want || p.Idle != (want == 0) {
			t.Fatalf("pod %s: %+v, want %d slots", id, p, want)
		}
	}
}

// A pod purged by a job that has not deleted it yet (reclaim purges, then deletes) is
// still listed Ready by the driver; reconcile running in between must not adopt it
// back as a new idle pod, but delete it.
func TestReconcileDoesNotAdoptAPurgedPod(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 4, 2)
	pod := h.addPod("a", "p1", 1)
	if _, err := h.Store.PodPurge(t.Context(), "a", pod.ID, "reclaimed", nil); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if _, ok := podState(h.Snap("a"), pod.ID); ok {
		t.Fatal("reconcile adopted a pod that was just purged")
	}
	if !h.deleted(pod.ID) {
		t.Fatal("the purged pod was not deleted from the driver")
	}
	h.reconcileIsNoop("a")
}

package sm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sm"
)

// fill routes n distinct sessions at once, alternating between the replicas, and
// returns their bindings; any error fails the test.
func fill(t *testing.T, scope, prefix string, n int, ms ...*sm.Manager) []warmpool.Binding {
	t.Helper()
	chs := make([]<-chan routed, n)
	for i := range n {
		chs[i] = routeAsync(ms[i%len(ms)], scope, fmt.Sprintf("%s%d", prefix, i), "")
	}
	out := make([]warmpool.Binding, n)
	for i, ch := range chs {
		r := replicatest.Recv(t, "the route", ch)
		if r.err != nil {
			t.Fatalf("route %s%d: %v", prefix, i, r.err)
		}
		out[i] = r.b
	}
	return out
}

// podSessions counts the sessions on each pod of a snapshot.
func podSessions(s redisstore.Snapshot) map[string]int {
	n := map[string]int{}
	for _, pod := range s.Sessions {
		n[pod]++
	}
	return n
}

// wantTwoByTwo asserts the scope has exactly two pods with two sessions each, slots
// matching, and that every binding names the pod its session is on.
func wantTwoByTwo(t *testing.T, h *replicatest.Harness, scope string, bs []warmpool.Binding) {
	t.Helper()
	s := h.Settled(scope)
	if len(s.Pods) != 2 || len(s.Sessions) != 4 {
		t.Fatalf("%d pods, %d sessions (%v); want 2 pods x 2 sessions", len(s.Pods), len(s.Sessions), s.Sessions)
	}
	on := podSessions(s)
	for _, p := range s.Pods {
		if on[p.Pod.ID] != 2 || p.Slots != 2 || p.Idle {
			t.Fatalf("pod %s: %d sessions, %d slots, idle %v; want 2 busy slots", p.Pod.ID, on[p.Pod.ID], p.Slots, p.Idle)
		}
	}
	for _, b := range bs {
		if s.Sessions[b.SessionID] != b.PodID || !b.New {
			t.Fatalf("binding %+v, but the session is on %q", b, s.Sessions[b.SessionID])
		}
	}
}

// Issue 3: four concurrent routes of distinct sessions fill a scope (pc 2, cc 4) with
// exactly two pods of two sessions, deployed side by side; once the pods are warm, a
// second wave fills them by first fit without deploying. A fifth session never fits.
// Guards the capacity gate of session_route.lua's first fit (`< pc`).
func TestConcurrentRoutesFillTwoPodsOfTwo(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize = 0 })
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})

	// Cold: every route finds no pod and acquires; both deploys run side by side.
	hold := h.Fake.Hold()
	chs := make([]<-chan routed, 4)
	for i := range 4 {
		chs[i] = routeAsync([]*sm.Manager{a, b}[i%2], "s", fmt.Sprintf("cold%d", i), "")
	}
	h.WaitInFlight(2)
	replicatest.WaitFor(t, "two followers in the rooms", func() bool { return len(h.Snap("s").Followers) == 2 })
	hold()
	var cold []warmpool.Binding
	for _, ch := range chs {
		r := replicatest.Recv(t, "the route", ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		cold = append(cold, r.b)
	}
	wantTwoByTwo(t, h, "s", cold)
	if n := h.Fake.DeployCount(); n != 2 {
		t.Fatalf("deploys = %d, want 2", n)
	}
	_, err := a.Route(context.Background(), "s", "fifth", "")
	wantCode(t, "fifth route on a full scope", err, warmpool.CodeNoPodAvailable)

	// Warm: both pods idle, four routes at once fill them by first fit.
	for _, c := range cold {
		if ok, err := b.End(context.Background(), "s", c.SessionID); !ok || err != nil {
			t.Fatalf("end %s = %v, %v", c.SessionID, ok, err)
		}
	}
	if s := h.Settled("s"); len(s.Pods) != 2 || !s.Pods[0].Idle || !s.Pods[1].Idle {
		t.Fatalf("after ending every session: %+v, want two idle pods", s.Pods)
	}
	warm := fill(t, "s", "warm", 4, a, b)
	wantTwoByTwo(t, h, "s", warm)
	if n := h.Fake.DeployCount(); n != 2 {
		t.Fatalf("deploys = %d after the warm wave, want still 2", n)
	}
	_, err = b.Route(context.Background(), "s", "fifth", "")
	wantCode(t, "fifth route on a full scope", err, warmpool.CodeNoPodAvailable)
	if s := h.Snap("s"); len(s.Sessions) != 4 {
		t.Fatalf("sessions after the refused fifth: %v", s.Sessions)
	}
}

// fullScope publishes a scope of max_pods 2 with pod_concurrency 1 and fills it with
// sessions "busy0" and "busy1".
func fullScope(t *testing.T, h *replicatest.Harness, m *sm.Manager, queue, waitS int) {
	t.Helper()
	h.Scope("s", 2, 1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = queue, waitS })
	fill(t, "s", "busy", 2, m)
}

// Issue 3: the waiter queue is bounded. With the scope full and the one queue place
// taken, the next route fails at once with QUEUE_FULL (503, retry_after 1) instead of
// waiting; the queued one is served when a session ends and leaves no entry.
func TestQueueFullFailsFast(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	fullScope(t, h, a, 1, 2)

	queued := routeAsync(a, "s", "queued", "")
	replicatest.WaitFor(t, "the route in the queue", func() bool { return len(h.Snap("s").Waiters) == 1 })

	overflow := replicatest.Recv(t, "the overflow route", routeAsync(b, "s", "overflow", ""))
	wantCode(t, "route with the queue full", overflow.err, warmpool.CodeQueueFull)
	if e := new(warmpool.Error); !errors.As(overflow.err, &e) || e.RetryAfter != 1 {
		t.Fatalf("QUEUE_FULL: %v, want retry_after 1 (only NO_POD_AVAILABLE with a deploy in flight waits longer)", overflow.err)
	}
	if overflow.took > 500*time.Millisecond {
		t.Fatalf("QUEUE_FULL took %s; it must not wait (wait_timeout_s is 2)", overflow.took)
	}
	if s := h.Snap("s"); len(s.Waiters) != 1 {
		t.Fatalf("waiters after the refusal = %v, want only the queued one", s.Waiters)
	}

	if ok, err := b.End(context.Background(), "s", "busy0"); !ok || err != nil {
		t.Fatalf("end = %v, %v", ok, err)
	}
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || !r.b.New {
		t.Fatalf("queued route = %+v, %v; want it served", r.b, r.err)
	}
	h.Settled("s")
}

// Issue 3: a queued route that gets no capacity gives up after wait_timeout_s with
// WAIT_TIMEOUT (504, retry_after) and leaves no waiter entry behind.
func TestQueuedRouteTimesOut(t *testing.T) {
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: 50 * time.Millisecond}})
	fullScope(t, h, a, 2, 1)

	late := replicatest.Recv(t, "the late route", routeAsync(a, "s", "late", ""))
	wantCode(t, "queued route", late.err, warmpool.CodeWaitTimeout)
	if late.took < 900*time.Millisecond || late.took > 2500*time.Millisecond {
		t.Fatalf("WAIT_TIMEOUT after %s, want about 1s", late.took)
	}
	s := h.Settled("s")
	if len(s.Waiters) != 0 || len(s.Sessions) != 2 {
		t.Fatalf("after the timeout: waiters %v sessions %v", s.Waiters, s.Sessions)
	}
}

// Issue 35.3: a route that gives up in the queue says where it stood: the first in
// line place 1, the one behind it place 2.
// The re-check is a minute: the second's place is the one its queueing pass gave it.
func TestTimedOutWaitersSayTheirPlace(t *testing.T) {
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	fullScope(t, h, a, 2, 1)

	first := routeAsync(a, "s", "first", "")
	replicatest.WaitFor(t, "the first route in the queue", func() bool { return len(h.Snap("s").Waiters) == 1 })
	second := routeAsync(a, "s", "second", "")
	for place, ch := range []<-chan routed{first, second} {
		r := replicatest.Recv(t, "a queued route", ch)
		wantCode(t, "queued route", r.err, warmpool.CodeWaitTimeout)
		if !strings.Contains(r.err.Error(), fmt.Sprintf("(place %d in line)", place+1)) {
			t.Fatalf("route %d in line: %v, want it to say its place", place+1, r.err)
		}
	}
	h.Settled("s")
}

// Issue 3: a route queued on replica A is served within a second of a session ending
// on replica B: B's end publishes on the scope's channel and A's subscription wakes
// the waiter. A's periodic re-check is a minute, so only the message can do it.
func TestWakeAcrossReplicas(t *testing.T) {
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	b := replica(h, replicatest.Config{})
	h.Scope("s", 1, 1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 1, 10 })
	first := mustRoute(t, b, "s", "first")

	queued := routeAsync(a, "s", "second", "")
	replicatest.WaitFor(t, "the route queued on A", func() bool { return len(h.Snap("s").Waiters) == 1 })
	ended := time.Now()
	if ok, err := b.End(context.Background(), "s", "first"); !ok || err != nil {
		t.Fatalf("end on B = %v, %v", ok, err)
	}
	r := replicatest.Recv(t, "the queued route", queued)
	woke := time.Since(ended)
	if r.err != nil || r.b.PodID != first.PodID || !r.b.New {
		t.Fatalf("queued route = %+v, %v; want the freed pod %s", r.b, r.err, first.PodID)
	}
	if woke > time.Second {
		t.Fatalf("served %s after the end on another replica, want within 1s", woke)
	}
	t.Logf("served %s after the end on replica B", woke.Round(time.Millisecond))
	if s := h.Settled("s"); len(s.Waiters) != 0 {
		t.Fatalf("waiters left: %v", s.Waiters)
	}
}

// SPEC §5: a missed wake-up only delays a waiter until its next re-check. The slot is
// handed to the waiter behind the managers' backs (the session unbound and its slot
// made the waiter's claim, as the end script does, but no message is published), and
// the waiter still binds it on its periodic re-check.
func TestLostWakeUpOnlyDelays(t *testing.T) {
	h := replicatest.New(t)
	// The waiter is first in line, so each of its passes asks the pool: its second
	// ask is the pass after it subscribed, the one a hand-off made before would meet.
	var asks atomic.Int32
	counted := func(p warmpool.Pool) warmpool.Pool { return &countingPool{Pool: p, n: &asks} }
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: 100 * time.Millisecond}, Pool: counted})
	h.Scope("s", 1, 1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 1, 10 })
	first := mustRoute(t, a, "s", "first")

	asks.Store(0)
	queued := routeAsync(a, "s", "second", "")
	replicatest.WaitFor(t, "the route queued and subscribed", func() bool { return asks.Load() >= 2 && len(h.Snap("s").Queue) == 1 })
	var waiter string
	for w := range h.Snap("s").Queue {
		waiter = w
	}
	ctx := context.Background()
	k := h.Store.Keys().Scope("s")
	pipe := h.Redis.Client.TxPipeline()
	pipe.HDel(ctx, k.Sessions, "first")
	pipe.ZRem(ctx, k.SessExp, "first")
	pipe.ZRem(ctx, k.Queue, waiter)
	pipe.ZAdd(ctx, k.Claims, redis.Z{Score: float64(time.Now().Add(redisstore.GrantTTL).UnixMilli()), Member: waiter})
	pipe.HSet(ctx, k.ClaimPod, waiter, first.PodID)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	handed := time.Now()
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || r.b.PodID != first.PodID {
		t.Fatalf("queued route = %+v, %v; want the freed pod", r.b, r.err)
	}
	t.Logf("served %s after the silent hand-off (re-check every 100ms)", time.Since(handed).Round(time.Millisecond))
	h.Settled("s")
}

// Issue 3 / SPEC §3 touch: a live session's TTL is refreshed; an expired one is
// evicted by the touch (touched:false, slot freed, the pod idle when it was the last);
// an unknown one reports false.
func TestTouch(t *testing.T) {
	h := replicatest.New(t)
	m := replica(h, replicatest.Config{Clock: h.Clock})
	cfg := h.Scope("s", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 5 })
	ttl := time.Duration(cfg.Config.Pool.SessionTTLS) * time.Second
	ctx := context.Background()
	one := mustRoute(t, m, "s", "one")
	two := mustRoute(t, m, "s", "two")
	if one.PodID != two.PodID {
		t.Fatalf("two sessions on %s and %s, want one pod", one.PodID, two.PodID)
	}

	h.Clock.Advance(3 * time.Second)
	if ok, err := m.Touch(ctx, "s", "one"); !ok || err != nil {
		t.Fatalf("touch of a live session = %v, %v", ok, err)
	}
	if got, want := h.Snap("s").SessExp["one"], h.Clock.Now().Add(ttl); !got.Equal(want) {
		t.Fatalf("expiry after touch = %s, want now + session_ttl = %s", got, want)
	}

	// "two" expires (5s after its route); "one" was refreshed and lives.
	h.Clock.Advance(3 * time.Second)
	if ok, err := m.Touch(ctx, "s", "two"); ok || err != nil {
		t.Fatalf("touch of an expired session = %v, %v; want false", ok, err)
	}
	s := h.Settled("s")
	if _, ok := s.Sessions["two"]; ok || len(s.Pods) != 1 || s.Pods[0].Slots != 1 || s.Pods[0].Idle {
		t.Fatalf("after evicting one of two: sessions %v pods %+v; want 1 busy slot", s.Sessions, s.Pods)
	}
	if _, err := m.Get(ctx, "s", "two"); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		t.Fatalf("get of the evicted session: %v", err)
	}

	h.Clock.Advance(ttl)
	if ok, err := m.Touch(ctx, "s", "one"); ok || err != nil {
		t.Fatalf("touch of the last, expired session = %v, %v; want false", ok, err)
	}
	s = h.Settled("s")
	if len(s.Sessions) != 0 || s.Pods[0].Slots != 0 || !s.Pods[0].Idle {
		t.Fatalf("after evicting the last session: sessions %v pod %+v; want an idle pod", s.Sessions, s.Pods[0])
	}
	for _, sess := range []string{"one", "never-seen"} {
		if ok, err := m.Touch(ctx, "s", sess); ok || err != nil {
			t.Fatalf("touch of unknown %s = %v, %v; want false", sess, ok, err)
		}
	}
}

// An expired session found by touch frees its slot and wakes a queued route at once
// (its re-check is a minute away, so only the wake-up serves it).
func TestTouchOfExpiredSessionWakesAWaiter(t *testing.T) {
	h := replicatest.New(t)
	m := replica(h, replicatest.Config{Clock: h.Clock, SM: sm.Config{Recheck: time.Minute}})
	h.Scope("s", 1, 1, func(c *warmpool.ScopeConfig) {
		c.Pool.SessionTTLS, c.Pool.QueueSize, c.Pool.WaitTimeoutS = 5, 1, 30
	})
	old := mustRoute(t, m, "s", "old")
	queued := routeAsync(m, "s", "next", "")
	replicatest.WaitFor(t, "the route queued", func() bool { return len(h.Snap("s").Waiters) == 1 })

	h.Clock.Advance(6 * time.Second)
	touched := time.Now()
	if ok, err := m.Touch(context.Background(), "s", "old"); ok || err != nil {
		t.Fatalf("touch of the expired session = %v, %v; want false", ok, err)
	}
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || r.b.PodID != old.PodID || !r.b.New {
		t.Fatalf("queued route = %+v, %v; want the freed pod %s", r.b, r.err, old.PodID)
	}
	if took := time.Since(touched); took > time.Second {
		t.Fatalf("waiter served %s after the eviction, want within 1s", took)
	}
	h.Settled("s")
}

// SPEC §3 end: released true for a bound session and false otherwise; the slot is
// freed; the last session's pod goes idle.
func TestEnd(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	h.Scope("s", 4, 2)
	ctx := context.Background()
	one := mustRoute(t, a, "s", "one")
	mustRoute(t, a, "s", "two")

	if ok, err := b.End(ctx, "s", "one"); !ok || err != nil {
		t.Fatalf("end of a bound session = %v, %v", ok, err)
	}
	s := h.Settled("s")
	if len(s.Pods) != 1 || s.Pods[0].Slots != 1 || s.Pods[0].Idle {
		t.Fatalf("after ending one of two: %+v, want 1 busy slot", s.Pods)
	}
	if ok, err := a.End(ctx, "s", "one"); ok || err != nil {
		t.Fatalf("second end = %v, %v; want false", ok, err)
	}
	if ok, err := a.End(ctx, "s", "never-seen"); ok || err != nil {
		t.Fatalf("end of an unknown session = %v, %v; want false", ok, err)
	}
	if ok, err := a.End(ctx, "s", "two"); !ok || err != nil {
		t.Fatalf("end of the last session = %v, %v", ok, err)
	}
	s = h.Settled("s")
	if len(s.Sessions) != 0 || s.Pods[0].Slots != 0 || !s.Pods[0].Idle || s.Pods[0].Pod.ID != one.PodID {
		t.Fatalf("after ending the last session: %+v, want pod %s idle with 0 slots", s.Pods, one.PodID)
	}
	// The freed capacity is usable again without a deploy.
	if again := mustRoute(t, b, "s", "three"); again.PodID != one.PodID || h.Fake.DeployCount() != 1 {
		t.Fatalf("route after end = %+v with %d deploys, want the idle pod", again, h.Fake.DeployCount())
	}
}

// Issue 3: twenty concurrent routes of one session on a warm scope, across two
// replicas, all get the same pod, with one new:true, and the scope holds one binding
// and one slot for it. Guards the "bound" check of session_route.lua. (Cold, the same
// holds with one deploy: TestConcurrentColdRoutesOfOneSessionDeployOnce.)
func TestAffinityUnderConcurrentRoutes(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	h.Scope("s", 40, 2)
	ctx := context.Background()
	mustRoute(t, a, "s", "warmup")
	if ok, err := a.End(ctx, "s", "warmup"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	const n = 20
	chs := make([]<-chan routed, n)
	for i := range n {
		chs[i] = routeAsync([]*sm.Manager{a, b}[i%2], "s", "sticky", "")
	}
	pods, news := map[string]int{}, 0
	for _, ch := range chs {
		r := replicatest.Recv(t, "the route", ch)
		if r.err != nil {
			t.Fatalf("route: %v", r.err)
		}
		pods[r.b.PodID]++
		if r.b.New {
			news++
		}
	}
	if len(pods) != 1 || news != 1 {
		t.Fatalf("routes of one session went to %v with %d new:true; want one pod, one new", pods, news)
	}
	s := h.Settled("s")
	slots := 0
	for _, p := range s.Pods {
		slots += p.Slots
	}
	if len(s.Sessions) != 1 || slots != 1 {
		t.Fatalf("sessions %v, %d slots in use; want one binding, one slot", s.Sessions, slots)
	}
	for pod := range pods {
		if s.Sessions["sticky"] != pod {
			t.Fatalf("binding %v, routes answered %s", s.Sessions, pod)
		}
	}
	if d := h.Fake.DeployCount(); d != 1 {
		t.Fatalf("%d deploys, want only the warm-up's", d)
	}
}

// answer is what a route answers over HTTP: the binding without its Source.
func answer(b warmpool.Binding) warmpool.Binding {
	b.Source = ""
	return b
}

// Issue 3: the same request id gets the same answer from any replica, new:true both
// times, and creates one session. SPEC §11.5: a different session sent with a used
// request id is refused with IDEMPOTENCY_MISMATCH and binds nothing (it got the first
// session's binding before).
func TestIdempotentReplay(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	h.Scope("s", 8, 2)
	ctx := context.Background()

	first, err := a.Route(ctx, "s", "one", "req-1")
	if err != nil || !first.New {
		t.Fatalf("first route = %+v, %v", first, err)
	}
	for i, m := range []*sm.Manager{a, b} {
		again, err := m.Route(ctx, "s", "one", "req-1")
		if err != nil || answer(again) != answer(first) || again.Source != warmpool.SourceAffinity {
			t.Fatalf("replay %d = %+v, %v; want %+v from the affinity source", i, again, err, first)
		}
	}
	other, err := b.Route(ctx, "s", "other", "req-1")
	if warmpool.ErrorCode(err) != warmpool.CodeIdempotencyMismatch {
		t.Fatalf("another session with a used request id = %+v, %v; want IDEMPOTENCY_MISMATCH", other, err)
	}
	s := h.Settled("s")
	if len(s.Sessions) != 1 || s.Sessions["one"] != first.PodID {
		t.Fatalf("sessions %v, want only one on %s", s.Sessions, first.PodID)
	}
	if _, err := a.Get(ctx, "s", "other"); warmpool.ErrorCode(err) != warmpool.CodeSessionNotFound {
		t.Fatalf("get of the refused other session: %v, want SESSION_NOT_FOUND", err)
	}
	// Without a request id the same session is just bound already.
	if plain, err := b.Route(ctx, "s", "one", ""); err != nil || plain.New || plain.PodID != first.PodID {
		t.Fatalf("plain route of a bound session = %+v, %v", plain, err)
	}
}

// The same request id sent to two replicas at once on a cold scope runs once: the
// second call waits for the first one's answer instead of taking a pod of its own
// (with pod_concurrency 1 it would have led a second deploy), and a route of another
// session with the id is refused while the first call runs.
func TestIdempotentReplayAcrossReplicasWhileDeploying(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	h.Scope("s", 8, 1)
	hold := h.Fake.Hold()
	ra := routeAsync(a, "s", "one", "req-1")
	h.WaitInFlight(1)
	rb := routeAsync(b, "s", "one", "req-1")
	// While the first call's deploy is held, the retry must not start a deploy of
	// its own. A negative can only be watched for a while: 300ms is ages for a
	// script call and a deploy start on loopback.
	if err := h.Fake.WaitInFlight(ctxTimeout(t, 300*time.Millisecond), 2); err == nil {
		t.Fatal("the retry started a second deploy while the first call was deploying")
	}
	// Meanwhile another session's route with the id is refused, without waiting for
	// the first call and without a deploy of its own.
	if o := replicatest.Recv(t, "another session's route on B", routeAsync(b, "s", "other", "req-1")); warmpool.ErrorCode(o.err) != warmpool.CodeIdempotencyMismatch {
		t.Fatalf("another session's route while the first call deploys = %+v, %v; want IDEMPOTENCY_MISMATCH", o.b, o.err)
	}
	hold()
	x, y := replicatest.Recv(t, "the route on A", ra), replicatest.Recv(t, "the route on B", rb)
	if x.err != nil || y.err != nil || answer(x.b) != answer(y.b) || !x.b.New {
		t.Fatalf("answers differ: %+v %v / %+v %v; want one answer with new:true", x.b, x.err, y.b, y.err)
	}
	if n := h.Fake.DeployCount(); n != 1 {
		t.Fatalf("deploys = %d for one request id, want 1", n)
	}
	s := h.Settled("s")
	if len(s.Sessions) != 1 || len(s.Pods) != 1 || s.Pods[0].Slots != 1 {
		t.Fatalf("sessions %v pods %+v; want one session in one slot", s.Sessions, s.Pods)
	}
}

// SPEC §4 class A change and §6.6: after a new deploy config is published, new
// sessions land only on pods of the new deploy_ver, even where an old pod has a free
// slot; sessions bound before keep their old pod. Guards the deploy_ver check of
// session_route.lua's first fit.
func TestNewSessionsOnlyOnTheCurrentDeployVer(t *testing.T) {
	h := replicatest.New(t)
	a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
	v1 := h.Scope("s", 8, 2).DeployVer
	ctx := context.Background()
	old := mustRoute(t, a, "s", "old")
	if old.DeployVer != v1 {
		t.Fatalf("first session on %s, want %s", old.DeployVer, v1)
	}

	v2 := h.Scope("s", 8, 2, func(c *warmpool.ScopeConfig) { c.Deploy.Image = "registry.example/agent:2" }).DeployVer
	if v2 == v1 {
		t.Fatal("the image change did not change deploy_ver")
	}
	// The old session keeps its pod.
	if again := mustRoute(t, b, "s", "old"); again.PodID != old.PodID || again.New || again.DeployVer != v1 {
		t.Fatalf("route of the old session after the change = %+v, want its pod %s", again, old.PodID)
	}
	// New sessions skip the old pod's free slot.
	for i, sess := range []string{"new1", "new2", "new3"} {
		nb := mustRoute(t, []*sm.Manager{a, b}[i%2], "s", sess)
		if nb.DeployVer != v2 || nb.PodID == old.PodID {
			t.Fatalf("new session %s landed on %s (%s), want a pod of %s", sess, nb.PodID, nb.DeployVer, v2)
		}
	}
	s := h.Settled("s")
	vers := map[string]string{}
	for _, p := range s.Pods {
		vers[p.Pod.ID] = p.Pod.DeployVer
	}
	for sess, pod := range s.Sessions {
		if want := map[bool]string{true: v1, false: v2}[sess == "old"]; vers[pod] != want {
			t.Fatalf("session %s on pod %s of %s, want %s", sess, pod, vers[pod], want)
		}
	}
	// The old pod, idle now, is never handed out again.
	if ok, err := a.End(ctx, "s", "old"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if nb := mustRoute(t, b, "s", "new4"); nb.DeployVer != v2 || nb.PodID == old.PodID {
		t.Fatalf("route after the old pod went idle = %+v, want a pod of %s", nb, v2)
	}
	if n := h.Fake.DeployCount(); n != 3 {
		t.Fatalf("deploys = %d, want 3 (one old, two new)", n)
	}
	h.Settled("s")
}

// The session expiry sweep evicts only sessions whose TTL has passed, frees their
// slots (the pod goes idle with its last) and honours the limit.
func TestExpireSessions(t *testing.T) {
	h := replicatest.New(t)
	m := replica(h, replicatest.Config{Clock: h.Clock})
	h.Scope("s", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 10 })
	ctx := context.Background()
	p1 := mustRoute(t, m, "s", "a1").PodID
	mustRoute(t, m, "s", "a2")
	h.Clock.Advance(5 * time.Second)
	mustRoute(t, m, "s", "b1") // on a second pod: the first is full
	p3 := mustRoute(t, m, "s", "c1").PodID
	if p3 == p1 {
		t.Fatal("c1 landed on the full pod")
	}

	if n, err := m.ExpireSessions(ctx, "s", 100); n != 0 || err != nil {
		t.Fatalf("expire before any TTL passed = %d, %v", n, err)
	}
	h.Clock.Advance(6 * time.Second) // a1, a2 are 11s old; b1, c1 5s
	if n, err := m.ExpireSessions(ctx, "s", 1); n != 1 || err != nil {
		t.Fatalf("expire with limit 1 = %d, %v", n, err)
	}
	if n, err := m.ExpireSessions(ctx, "s", 100); n != 1 || err != nil {
		t.Fatalf("expire of the rest = %d, %v; want the other expired one", n, err)
	}
	s := h.Settled("s")
	if len(s.Sessions) != 2 || s.Sessions["b1"] == "" || s.Sessions["c1"] == "" {
		t.Fatalf("sessions left %v, want b1 and c1", s.Sessions)
	}
	for _, p := range s.Pods {
		if p.Pod.ID == p1 && (p.Slots != 0 || !p.Idle) {
			t.Fatalf("pod of the expired sessions: %+v, want idle with 0 slots", p)
		}
		if p.Pod.ID != p1 && p.Slots != 2 {
			t.Fatalf("pod %s: %d slots, want 2", p.Pod.ID, p.Slots)
		}
	}
	if n, err := m.ExpireSessions(ctx, "s", 100); n != 0 || err != nil {
		t.Fatalf("second sweep = %d, %v", n, err)
	}
}

// SPEC §3 error codes of the session calls: unknown scope, bad ids, Redis down.
func TestErrors(t *testing.T) {
	h := replicatest.New(t)
	m := replica(h, replicatest.Config{})
	h.Scope("s", 4, 2)
	ctx := context.Background()
	calls := map[string]func(scope, session string) error{
		"route": func(sc, se string) error { _, err := m.Route(ctx, sc, se, ""); return err },
		"touch": func(sc, se string) error { _, err := m.Touch(ctx, sc, se); return err },
		"end":   func(sc, se string) error { _, err := m.End(ctx, sc, se); return err },
		"get":   func(sc, se string) error { _, err := m.Get(ctx, sc, se); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			wantCode(t, "unknown scope", call("nope", "s1"), warmpool.CodeScopeNotFound)
			for _, bad := range []string{"", "has space", strings.Repeat("x", 129), "x')..redis.call('FLUSHALL", "ü", "a\nb", "{s}"} {
				wantCode(t, fmt.Sprintf("session id %q", bad), call("s", bad), warmpool.CodeValidation)
			}
			for _, bad := range []string{"", "UPPER", "-x", strings.Repeat("a", 64), "a{b}"} {
				wantCode(t, fmt.Sprintf("scope id %q", bad), call(bad, "s1"), warmpool.CodeValidation)
			}
		})
	}
	_, err := m.Route(ctx, "s", "s1", "bad request id")
	wantCode(t, "bad request id", err, warmpool.CodeValidation)
	if s := h.Snap("s"); len(s.Sessions) != 0 || len(s.Pods) != 0 {
		t.Fatalf("a refused call changed state: %+v", s)
	}
}

// SPEC §7: with Redis unreachable every session call answers STORE_UNAVAILABLE
// quickly, and nothing hangs.
func TestRedisDownIsStoreUnavailable(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 4, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: dead, DialTimeout: 500 * time.Millisecond, MaxRetries: 1})
	defer c.Close()
	store := redisstore.NewStore(c, h.Redis.Prefix)
	m := sm.New(store, poolFunc(func() error { t.Error("acquire called with Redis down"); return nil }), sm.Config{})
	defer m.Close()
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"route":  func() error { _, err := m.Route(ctx, "s", "s1", "r1"); return err },
		"touch":  func() error { _, err := m.Touch(ctx, "s", "s1"); return err },
		"end":    func() error { _, err := m.End(ctx, "s", "s1"); return err },
		"get":    func() error { _, err := m.Get(ctx, "s", "s1"); return err },
		"expire": func() error { _, err := m.ExpireSessions(ctx, "s", 10); return err },
	} {
		start := time.Now()
		err := call()
		took := time.Since(start)
		wantCode(t, name+" with Redis down", err, warmpool.CodeStoreUnavailable)
		if took > 2*time.Second {
			t.Fatalf("%s took %s with Redis down, want quick", name, took)
		}
		t.Logf("%s: %s after %s", name, warmpool.ErrorCode(err), took.Round(time.Millisecond))
	}

	// A Redis that goes away under a live manager (miniredis only: the real server is
	// shared by the other tests).
	if h.Redis.Mini != nil {
		live := replica(h, replicatest.Config{})
		mustRoute(t, live, "s", "s1")
		h.Redis.Mini.Close()
		start := time.Now()
		_, err := live.Route(ctx, "s", "s2", "")
		wantCode(t, "route after Redis went away", err, warmpool.CodeStoreUnavailable)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("route took %s after Redis went away", took)
		}
	}
}

// poolFunc is a Pool whose Acquire runs f and reports NO_POD_AVAILABLE.
type poolFunc func() error

func (f poolFunc) Acquire(context.Context, string) (warmpool.Lease, error) {
	if err := f(); err != nil {
		return warmpool.Lease{}, err
	}
	return warmpool.Lease{}, warmpool.Errorf(warmpool.CodeNoPodAvailable, "test pool")
}

func (f poolFunc) ReleaseClaim(context.Context, string, string) error { return nil }

// countingPool counts the calls of Acquire.
type countingPool struct {
	warmpool.Pool
	n *atomic.Int32
}

func (c *countingPool) Acquire(ctx context.Context, scope string) (warmpool.Lease, error) {
	c.n.Add(1)
	return c.Pool.Acquire(ctx, scope)
}

// gatedPool holds every Acquire until the test opens its gate.
type gatedPool struct {
	warmpool.Pool
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (g *gatedPool) Acquire(ctx context.Context, scope string) (warmpool.Lease, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Pool.Acquire(ctx, scope)
}

func (g *gatedPool) open() { g.once.Do(func() { close(g.gate) }) }

// A pod that registers between a route's first fit and its acquire (another replica
// deployed it) has a free slot; the route takes it instead of reporting the scope full.
func TestRouteSeesAPodRegisteredWhileItAcquired(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 2, 2, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize = 0 }) // max_pods 1, no queue
	g := &gatedPool{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	t.Cleanup(g.open)
	a := replica(h, replicatest.Config{Pool: func(p warmpool.Pool) warmpool.Pool { g.Pool = p; return g }})
	b := replica(h, replicatest.Config{})

	slow := routeAsync(a, "s", "slow", "")
	<-g.entered // A's first fit found nothing; its acquire waits
	fast := mustRoute(t, b, "s", "fast")
	g.open()
	r := replicatest.Recv(t, "the slow route", slow)
	if r.err != nil || r.b.PodID != fast.PodID {
		t.Fatalf("route = %+v, %v; want the free slot on %s", r.b, r.err, fast.PodID)
	}
	h.Settled("s")
}

// ctxTimeout is a context that ends after d (or with the test).
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

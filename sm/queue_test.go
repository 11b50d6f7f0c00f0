package sm_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sm"
)

// served is one queued route's outcome with the time it answered.
type served struct {
	session string
	b       warmpool.Binding
	err     error
	at      time.Time
}

// queueScope publishes scope with max_concurrency mc, pod_concurrency pc and a queue of
// queue places waiting up to waitS seconds.
func queueScope(h *replicatest.Harness, scope string, mc, pc, queue, waitS int) {
	h.Scope(scope, mc, pc, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = queue, waitS })
}

// Issue 12.2: 20 routes queued on two replicas, in a known order, are served in that
// order as 20 sessions end one by one (alternately on either replica), each by the
// wake-up of the end that freed its slot: the re-check is a minute. The wake latency
// is the time from the end's return to the waiter's answer. Guards next_waiter in
// lua/lib/handoff.lua (the oldest waiter first) and the hand-off of session_end.lua.
func TestFairQueueServesInArrivalOrder(t *testing.T) {
	const n = 20
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	b := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	reps := []*sm.Manager{a, b}
	queueScope(h, "q", n, 4, n, 60)
	fill(t, "q", "busy", n, a, b)

	out := make(chan served, n)
	for i := range n {
		session := fmt.Sprintf("w%02d", i)
		go func() {
			b, err := reps[i%2].Route(context.Background(), "q", session, "")
			out <- served{session, b, err, time.Now()}
		}()
		replicatest.WaitFor(t, session+" queued", func() bool { return len(h.Snap("q").Queue) == i+1 })
	}

	var order []string
	var lat []time.Duration
	for i := range n {
		if _, err := reps[(i+1)%2].End(context.Background(), "q", fmt.Sprintf("busy%d", i)); err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		select {
		case s := <-out:
			if s.err != nil || !s.b.New {
				t.Fatalf("queued route %s: %+v, %v", s.session, s.b, s.err)
			}
			order = append(order, s.session)
			lat = append(lat, max(0, s.at.Sub(ended)))
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter served within 5s of ending busy%d (served so far: %v)", i, order)
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[(len(lat)*99+99)/100-1]
	t.Logf("served order %v; wake latency p50 %s p99 %s", order, p50, p99)
	for i, s := range order {
		if want := fmt.Sprintf("w%02d", i); s != want {
			t.Fatalf("served order %v: position %d is %s, want %s", order, i, s, want)
		}
	}
	if p99 > 100*time.Millisecond {
		t.Fatalf("wake latency p99 %s, want under 100ms", p99)
	}
	h.Settled("q")
}

// Issue 12.2: while routes wait, a newcomer queues behind them even when it arrives
// as a slot frees: the slot goes to the waiter, and the newcomer gets the next one.
func TestNewcomerQueuesBehindWaiters(t *testing.T) {
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	b := replica(h, replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	queueScope(h, "n", 2, 1, 4, 30)
	fill(t, "n", "busy", 2, a)

	first := routeAsync(a, "n", "first", "")
	replicatest.WaitFor(t, "first queued", func() bool { return len(h.Snap("n").Queue) == 1 })
	// The slot frees behind the waiter's back (no route runs): the end hands it over.
	if ok, err := b.End(context.Background(), "n", "busy0"); !ok || err != nil {
		t.Fatalf("end = %v, %v", ok, err)
	}
	late := routeAsync(b, "n", "late", "")
	r := replicatest.Recv(t, "the first waiter", first)
	if r.err != nil || !r.b.New {
		t.Fatalf("first waiter: %+v, %v", r.b, r.err)
	}
	replicatest.WaitFor(t, "the newcomer queued", func() bool { return len(h.Snap("n").Queue) == 1 })
	if _, err := a.End(context.Background(), "n", "busy1"); err != nil {
		t.Fatal(err)
	}
	if r := replicatest.Recv(t, "the newcomer", late); r.err != nil || !r.b.New {
		t.Fatalf("newcomer: %+v, %v", r.b, r.err)
	}
	h.Settled("n")
}

// Issue 12.3: a claim given back wakes a queued route at once; the re-check is a
// minute, so only a hand-off made by the release can serve it in time. Guards the
// hand-off of claim_release.lua.
func TestClaimReleaseServesAWaiter(t *testing.T) {
	h := replicatest.New(t)
	a := h.Replica(replicatest.Config{SM: sm.Config{Recheck: time.Minute}})
	queueScope(h, "c", 1, 1, 1, 10)
	lease, err := a.RM.Acquire(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	queued := routeAsync(a.SM, "c", "s1", "")
	replicatest.WaitFor(t, "the route queued", func() bool { return len(h.Snap("c").Queue) == 1 })
	if err := a.RM.ReleaseClaim(context.Background(), "c", lease.Claim); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	r := replicatest.Recv(t, "the queued route", queued)
	took := time.Since(released)
	if r.err != nil || r.b.PodID != lease.Pod.ID {
		t.Fatalf("queued route = %+v, %v; want the released pod %s", r.b, r.err, lease.Pod.ID)
	}
	t.Logf("served %s after the claim release", took.Round(time.Microsecond))
	if took > 100*time.Millisecond {
		t.Fatalf("served %s after the claim release, want well under the re-check", took)
	}
	h.Settled("c")
}

// Issue 12.1: a hold nobody releases is freed by itself at hold_until, by the session
// expiry sweep when nothing else runs, and its slot goes to the waiter at once.
func TestExpiredHoldGoesToAWaiter(t *testing.T) {
	h := replicatest.New(t)
	a := h.Replica(replicatest.Config{Clock: h.Clock, SM: sm.Config{Recheck: time.Minute}})
	h.Scope("h", 1, 1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS, c.Pool.HoldTTLS = 1, 60, 5 })
	ctx := context.Background()
	held, err := a.RM.Hold(ctx, "h", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := h.Clock.Now().Add(5 * time.Second); !held.Until.Equal(want) {
		t.Fatalf("hold until %s, want %s", held.Until, want)
	}
	queued := routeAsync(a.SM, "h", "s1", "")
	replicatest.WaitFor(t, "the route queued", func() bool { return len(h.Snap("h").Queue) == 1 })

	h.Clock.Advance(4 * time.Second)
	if n, err := a.SM.ExpireSessions(ctx, "h", 100); n != 0 || err != nil {
		t.Fatalf("expiry sweep = %d, %v", n, err)
	}
	if s := h.Snap("h"); len(s.Queue) != 1 || s.ClaimPod[held.ID] != held.Pod.ID {
		t.Fatalf("a live hold was dropped: queue %v claims %v", s.Queue, s.ClaimPod)
	}
	h.Clock.Advance(2 * time.Second)
	if _, err := a.SM.ExpireSessions(ctx, "h", 100); err != nil {
		t.Fatal(err)
	}
	swept := time.Now()
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || r.b.PodID != held.Pod.ID {
		t.Fatalf("queued route = %+v, %v; want the held pod %s", r.b, r.err, held.Pod.ID)
	}
	t.Logf("served %s after the sweep freed the expired hold", time.Since(swept).Round(time.Microsecond))
	if _, err := a.RM.TouchHold(ctx, "h", held.Pod.ID, held.ID); warmpool.ErrorCode(err) != warmpool.CodeHoldNotFound {
		t.Fatalf("touch of the expired hold: %v, want HOLD_NOT_FOUND", err)
	}
	h.Settled("h")
}

// Issue 12.2: a slot handed to a waiter that died (its replica crashed with it queued)
// is not lost: the grant expires after redisstore.GrantTTL and goes to the next waiter, which
// finds it on its periodic re-check. Guards the grant's deadline (grant in
// lib/handoff.lua).
func TestDeadWaitersSlotIsHandedOn(t *testing.T) {
	h := replicatest.New(t)
	a := replica(h, replicatest.Config{Clock: h.Clock, SM: sm.Config{Recheck: 20 * time.Millisecond}})
	queueScope(h, "d", 1, 1, 2, 60)
	ctx := context.Background()
	first := mustRoute(t, a, "d", "first")
	// The dead waiter queued first, through the store, and nobody runs its passes.
	if res, err := h.Store.SessionRoute(ctx, "d", redisstore.RouteArgs{Now: h.Clock.Now(), Session: "ghost", Waiter: "dead", Join: true}); err != nil || res.Kind != redisstore.RouteQueued {
		t.Fatalf("dead waiter's route = %+v, %v", res, err)
	}
	live := routeAsync(a, "d", "live", "")
	replicatest.WaitFor(t, "the live route queued", func() bool { return len(h.Snap("d").Queue) == 2 })

	if _, err := a.End(ctx, "d", "first"); err != nil {
		t.Fatal(err)
	}
	if s := h.Snap("d"); s.ClaimPod["dead"] != first.PodID || len(s.Queue) != 1 {
		t.Fatalf("after the end: claims %v queue %v; want the slot handed to the oldest (dead) waiter", s.ClaimPod, s.Queue)
	}
	h.Clock.Advance(redisstore.GrantTTL + time.Second)
	r := replicatest.Recv(t, "the live waiter", live)
	if r.err != nil || r.b.PodID != first.PodID {
		t.Fatalf("live waiter = %+v, %v; want the slot the dead one never took", r.b, r.err)
	}
	// The dead waiter's own entry goes with its deadline.
	h.Clock.Advance(time.Minute)
	if _, err := h.Store.ScopeRepair(ctx, "d", h.Clock.Now(), h.Clock.Now(), false); err != nil {
		t.Fatal(err)
	}
	h.Settled("d")
}

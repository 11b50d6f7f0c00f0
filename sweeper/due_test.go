package sweeper_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// sweepDue runs the due job of every shard once.
func (h *harness) sweepDue() {
	h.t.Helper()
	for shard := range redisstore.DueShards {
		if err := h.sw.SweepShard(context.Background(), shard); err != nil {
			h.t.Fatalf("due job of shard %d: %v", shard, err)
		}
	}
}

// keyLog records every argument of every command that names a scope's key (a hash
// tag); its record method is the hook.
type keyLog struct {
	mu   sync.Mutex
	args []string
}

func (l *keyLog) record(cmd redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, "{") {
			l.args = append(l.args, s)
		}
	}
}

// read reports whether any command named a key of the scope.
func (l *keyLog) read(scope string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.args {
		if strings.Contains(a, "{"+scope+"}") {
			return true
		}
	}
	return false
}

// A tick reads only the scopes with work due: ten scopes with one pod and one live
// session each are not read at all, while the one whose session expired is, and its
// session is evicted.
func TestDueTickReadsOnlyDueScopes(t *testing.T) {
	h := newHarness(t)
	var idle []string
	for _, id := range []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7", "i8", "i9"} {
		h.Scope(id, 2, 1)
		h.route(id, "s")
		idle = append(idle, id)
	}
	h.Scope("due", 2, 1, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 60 })
	h.route("due", "s")
	h.sweepDue() // each publish made its scope due at once

	log := &keyLog{}
	h.client.AddHook(testredis.EachCommand(log.record))
	h.Clock.Advance(61 * time.Second)
	h.sweepDue()
	for _, id := range idle {
		if log.read(id) {
			t.Fatalf("the tick read idle scope %s", id)
		}
	}
	if !log.read("due") {
		t.Fatal("the tick did not read the scope whose session expired")
	}
	if s := h.Snap("due").Sessions; len(s) != 0 {
		t.Fatalf("sessions %v after their expiry was due", s)
	}
	if s := h.Snap("i0").Sessions; len(s) != 1 {
		t.Fatalf("idle scope's sessions %v, want its one live session", s)
	}
}

// Every kind of work a script leaves for later is found by the due jobs alone, when it
// falls due and not before.
func TestDueWorkIsFound(t *testing.T) {
	ttl := func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS, c.Pool.SessionTTLS, c.Pool.HoldTTLS = 60, 60, 60 }
	cases := []struct {
		name string
		// set up leaves work due in 61 s (at once when atOnce) and returns a check
		// that it is done.
		setup  func(h *harness) (done func() bool)
		atOnce bool
	}{
		{"idle pod past pod_ttl_s", func(h *harness) func() bool {
			pod := h.route("a", "s1").PodID
			if _, err := h.sm.End(context.Background(), "a", "s1"); err != nil {
				h.t.Fatal(err)
			}
			return func() bool { return h.deleted(pod) }
		}, false},
		{"session past session_ttl_s", func(h *harness) func() bool {
			// On a pod idle long before, so that nothing else of the scope falls due
			// before the session expires.
			h.Scope("a", 2, 1, ttl, func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS = 3600 })
			h.route("a", "s0")
			if _, err := h.sm.End(context.Background(), "a", "s0"); err != nil {
				h.t.Fatal(err)
			}
			h.sweepDue()
			h.route("a", "s1")
			return func() bool { return len(h.Snap("a").Sessions) == 0 }
		}, false},
		{"hold past hold_ttl_s", func(h *harness) func() bool {
			if _, err := h.rm.Hold(context.Background(), "a", ""); err != nil {
				h.t.Fatal(err)
			}
			return func() bool {
				s := h.Snap("a")
				return len(s.Claims) == 0 && len(idleIDs(s)) == 1
			}
		}, false},
		{"deploy lease of a leader that died", func(h *harness) func() bool {
			now := h.Clock.Now()
			res, err := h.Store.PodAcquire(context.Background(), "a", redisstore.AcquireArgs{Now: now, Claim: "c1",
				ClaimDeadline: now.Add(61 * time.Second), LeaseDeadline: now.Add(61 * time.Second)})
			if err != nil || res.Kind != redisstore.AcquireDeploy {
				h.t.Fatalf("acquire: %+v %v", res, err)
			}
			return func() bool { s := h.Snap("a"); return len(s.Deploys) == 0 && len(s.Claims) == 0 }
		}, false},
		{"idle pod of an old deploy_ver", func(h *harness) func() bool {
			pod := h.route("a", "s1").PodID
			if _, err := h.sm.End(context.Background(), "a", "s1"); err != nil {
				h.t.Fatal(err)
			}
			h.Clock.Advance(61 * time.Second)
			h.Scope("a", 2, 1, ttl, func(c *warmpool.ScopeConfig) { c.Pool.PodTTLS = 3600; c.Deploy.Image = "agent:2" })
			return func() bool { return h.deleted(pod) }
		}, true},
		{"a pool below min_idle_pods after its warm pod was taken", func(h *harness) func() bool {
			h.Scope("a", 4, 1, ttl, func(c *warmpool.ScopeConfig) { c.Pool.MinIdlePods = 1; c.Pool.PodTTLS = 3600 })
			h.sweepDue()
			h.waitDeploys()
			if n := h.Fake.DeployCount(); n != 1 {
				h.t.Fatalf("%d deploys after min_idle_pods 1 was published, want 1", n)
			}
			h.route("a", "s1") // takes the warm pod
			return func() bool { h.waitDeploys(); return h.Fake.DeployCount() == 2 && len(idleIDs(h.Snap("a"))) == 1 }
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.Scope("a", 2, 1, ttl)
			h.sweepDue()
			done := c.setup(h)
			h.sweepDue()
			if !c.atOnce {
				if done() {
					t.Fatal("done before it was due")
				}
				h.Clock.Advance(61 * time.Second)
				h.sweepDue()
			}
			if !done() {
				t.Fatal("not done once due")
			}
			h.Settled("a")
		})
	}
}

// The full pass is the safety net of the due index: a scope whose index entry was lost
// (a replica died between a script and its index write) is not looked at by the due
// jobs until the full pass indexes it again, and then its due work is done.
func TestReindexFindsWorkTheIndexLost(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 2, 1, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 60 })
	h.route("a", "s1")
	for shard := range redisstore.DueShards {
		if err := h.Redis.Client.Del(context.Background(), h.Store.Keys().DueIndex(shard)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h.Clock.Advance(61 * time.Second)
	h.sweepDue()
	if len(h.Snap("a").Sessions) != 1 {
		t.Fatal("the session was evicted with its scope out of the index")
	}
	if err := h.sw.Reindex(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.sweepDue()
	if s := h.Snap("a").Sessions; len(s) != 0 {
		t.Fatalf("sessions %v after the full pass", s)
	}
}

// Three replicas share the due jobs, shard by shard: each runs some of them. A replica
// killed while it holds a shard's lease (it never releases or extends it) stalls that
// shard, and only that shard, until the lease expires: then another replica takes the
// shard and does its due work.
func TestDueShardsSharedByReplicas(t *testing.T) {
	h := newHarness(t)
	h.Scope("a", 2, 1, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS = 60 })
	const lease = 2 * time.Second
	var mu sync.Mutex
	ran := map[int]map[string]bool{} // replica -> due jobs it ran
	runs := 0                        // due job runs, all replicas
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		r := h.Replica(replicatest.Config{Clock: h.Clock, Sweeper: sweeper.Config{Interval: 20 * time.Millisecond, Reconcile: time.Hour}})
		runner := sweeper.NewRunner(r.Store, r.Sweeper.Jobs(), lease, nil)
		runner.OnRun = func(job, outcome string, _ time.Duration) {
			if outcome == "ok" && strings.HasPrefix(job, "due:") {
				mu.Lock()
				defer mu.Unlock()
				if ran[i] == nil {
					ran[i] = map[string]bool{}
				}
				ran[i][job] = true
				runs++
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); runner.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	replicatest.WaitFor(t, "every replica to run due jobs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 3
	})

	// The replica that holds scope a's shard dies: its lease stays until it runs out.
	// The dead holder's lease is long, so that the other shards go round before it
	// runs out however slow the machine; then it is made to run out.
	key, _ := h.staleLock(sweeper.DueJobName(redisstore.DueShard("a")), time.Minute)
	h.route("a", "s1")
	h.Clock.Advance(61 * time.Second)
	mu.Lock()
	base := runs
	mu.Unlock()
	replicatest.WaitFor(t, "the other shards to run on", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs >= base+3*redisstore.DueShards
	})
	if len(h.Snap("a").Sessions) != 1 {
		t.Fatal("the shard ran while a dead replica held its lease")
	}
	h.expireLease(key)
	replicatest.WaitFor(t, "the expired session to be evicted", func() bool { return len(h.Snap("a").Sessions) == 0 })
}

// A due-index write that failed (Redis out of reach for a moment, the Cluster node of
// the shard down) is written again by the replica within a few ticks: Follow retries
// the replica's failed writes every Interval. Before, the write was dropped and the
// scope stayed indexed at its later time until the hourly audit: here, a session would
// have outlived its TTL by an hour.
func TestLostDueWriteIsRepairedWithinTicks(t *testing.T) {
	const tick = 50 * time.Millisecond
	h := newHarness(t, func(o *options) { o.sweep.Interval = tick })
	ctx := t.Context()
	h.Scope("a", 2, 1, func(c *warmpool.ScopeConfig) { c.Pool.SessionTTLS, c.Pool.PodTTLS = 60, 3600 })
	h.route("a", "s0")
	if _, err := h.sm.End(ctx, "a", "s0"); err != nil {
		t.Fatal(err)
	}
	h.sweepDue() // the scope is indexed an hour ahead, at its idle pod's pod_ttl_s
	shard := redisstore.DueShard("a")
	fail := testredis.FailCommands(-1, testredis.Named("zadd", h.Store.Keys().DueIndex(shard)))
	h.client.AddHook(fail)
	h.route("a", "s1")
	fail.Stop()
	if fail.Failed() == 0 {
		t.Fatal("the route wrote no due note")
	}
	h.follow()
	await.True(t, 20*tick+feedWithin, "the replica writes the failed index entry again", func() bool {
		ids, err := h.Store.DueScopes(ctx, shard, h.Clock.Now().Add(61*time.Second), 10)
		return err == nil && slices.Contains(ids, "a")
	})
	h.Clock.Advance(61 * time.Second)
	h.sweepDue()
	if s := h.Snap("a").Sessions; len(s) != 0 {
		t.Fatalf("sessions %v after their expiry was due", s)
	}
}

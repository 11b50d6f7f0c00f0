package sweeper_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/sweeper"
)

// feedWithin bounds how long the feed takes to apply a change: SQLite's poll of a
// second, and room for a loaded machine.
const feedWithin = 10 * time.Second

// follow runs the sweeper's Follow until the test ends, and returns once it applies
// changes: a scope of its own, feed-ready, is stored (and not published) until the
// feed has published it.
func (h *harness) follow() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.sw.Follow(ctx); !errors.Is(err, context.Canceled) {
			h.t.Errorf("Follow after its context ended = %v, want context.Canceled", err)
		}
	})
	h.t.Cleanup(func() { cancel(); wg.Wait() })
	cfg := replicatest.ScopeConfig(h.t, 2, 2)
	var (
		last    time.Time
		version int64
	)
	// Done when Redis has the latest version stored: every feed-ready put before it
	// was applied too, and none is left to come during the test.
	await.True(h.t, feedWithin, "the feed publishes a stored config", func() bool {
		if rec, err := h.Store.Scope(context.Background(), "feed-ready"); err == nil && rec.Version == version {
			return true
		}
		if time.Since(last) >= 200*time.Millisecond {
			stored, err := h.Configs.Put(context.Background(), "feed-ready", cfg)
			if err != nil {
				h.t.Fatal(err)
			}
			last, version = time.Now(), stored.Version
		}
		return false
	})
}

// observed is how often the sweeper reported event with outcome.
func (h *harness) observed(event, outcome string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.observedMap[event+"/"+outcome]
}

// A config stored and not published (the writer's publish failed: the PUT answered
// STORE_UNAVAILABLE) is published from the feed, with no full pass; and a delete
// stored that did not reach Redis is made there. The full pass that follows, the
// audit, has nothing left to fix.
func TestFeedPublishesWhatTheWriterDidNot(t *testing.T) {
	var (
		mu    sync.Mutex
		fixes []string
	)
	h := newHarness(t, func(o *options) {
		o.sweep.OnFix = func(_, fix string) { mu.Lock(); fixes = append(fixes, fix); mu.Unlock() }
	})
	ctx := t.Context()
	h.Scope("gone", 4, 2)
	h.follow()

	stored, err := h.Configs.Put(ctx, "stale", replicatest.ScopeConfig(t, 4, 2))
	if err != nil {
		t.Fatal(err)
	}
	await.True(t, feedWithin, "the feed publishes the stored config", func() bool {
		rec, err := h.Store.Scope(ctx, "stale")
		return err == nil && rec.Version == stored.Version
	})
	if _, err := h.Configs.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	await.True(t, feedWithin, "the feed deletes in Redis the scope the store deleted", func() bool {
		_, err := h.Store.Scope(ctx, "gone")
		return warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound && h.observed("config_feed", "deleted_scope") > 0
	})
	if n := h.observed("config_feed", "published"); n < 2 {
		t.Errorf("config_feed/published = %d, want feed-ready and stale", n)
	}
	if n := h.observed("config_feed", "deleted_scope"); n != 1 {
		t.Errorf("config_feed/deleted_scope = %d, want 1", n)
	}
	if err := h.sw.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(fixes) != 0 {
		t.Errorf("the full pass after the feed fixed %v, want nothing", fixes)
	}
}

// A new scope's first pod is probed at the scope's own probe period from the start,
// not at the default until some refresh: the watch reads the period from Redis the
// first time it sees a pod of the scope. A changed period takes effect as soon as the
// feed brings the change.
func TestProbePeriodOfNewAndChangedScope(t *testing.T) {
	var drv *countingDriver
	h := newHarness(t, countingProbes(&drv))
	ctx := t.Context()
	h.follow()
	h.Scope("old", 4, 2)
	h.addPod("old", "old-p1", 1)
	if err := h.sw.Watch(ctx); err != nil { // the watch has run, and read what it knew
		t.Fatal(err)
	}
	drv.take()

	period := func(s int) func(*warmpool.ScopeConfig) {
		return func(c *warmpool.ScopeConfig) { c.Pool.ProbePeriodS = s }
	}
	h.Scope("fresh", 4, 2, period(1))
	h.addPod("fresh", "fresh-p1", 1)
	windows := func(n int) int {
		t.Helper()
		probes := 0
		for range n {
			h.Clock.Advance(time.Second)
			if err := h.sw.Watch(ctx); err != nil {
				t.Fatal(err)
			}
			probes += drv.take()["fresh-p1"]
		}
		return probes
	}
	if got := windows(5); got != 5 {
		t.Fatalf("the new scope's first pod was probed %d times in 5 s, want 5 (probe_period_s 1, from its first pod)", got)
	}

	h.Scope("fresh", 4, 2, period(5))
	await.True(t, feedWithin, "the feed brings the changed period", func() bool {
		p, _ := sweeper.ProbePeriodOf(h.sw, "fresh")
		return p == 5*time.Second
	})
	if got := windows(10); got != 2 {
		t.Fatalf("after probe_period_s 5 the pod was probed %d times in 10 s, want 2", got)
	}
}

// nsDriver is the fake driver that lists only the namespaces named to it, as the
// Kubernetes driver does: it records them.
type nsDriver struct {
	*fake.Driver
	mu    sync.Mutex
	named map[string]int
}

func (d *nsDriver) WatchNamespace(_ context.Context, ns string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.named[ns]++
	return nil
}

func (d *nsDriver) has(ns string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.named[ns] > 0
}

// The namespaces of the stored scopes are named to the driver when the replica
// starts following, and a new scope's from its change in the feed, with no read of
// every config on a timer.
func TestFeedNamesNamespaces(t *testing.T) {
	var drv *nsDriver
	h := newHarness(t, func(o *options) {
		o.driver = func(f *fake.Driver) warmpool.PodDriver {
			drv = &nsDriver{Driver: f, named: map[string]int{}}
			return drv
		}
	})
	in := func(ns string) func(*warmpool.ScopeConfig) {
		return func(c *warmpool.ScopeConfig) { c.Deploy.Namespace = ns }
	}
	h.Scope("before", 4, 2, in("ns-before"))
	h.follow()
	await.True(t, feedWithin, "the stored scope's namespace is named at the start", func() bool { return drv.has("ns-before") })
	h.Scope("after", 4, 2, in("ns-after"))
	await.True(t, feedWithin, "the new scope's namespace is named from the feed", func() bool { return drv.has("ns-after") })
}

package sweeper_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// listingDriver is the fake driver counting its lists.
type listingDriver struct {
	*fake.Driver
	lists atomic.Int32
}

func (l *listingDriver) List(ctx context.Context) ([]warmpool.Pod, error) {
	l.lists.Add(1)
	return l.Driver.List(ctx)
}

// droppingDriver is the listing fake driver whose pod events of the pods in drop are
// lost on the way, as events missed while a watch was down.
type droppingDriver struct {
	*listingDriver
	mu   sync.Mutex
	drop map[string]bool
	fns  []func(warmpool.PodEvent)
}

func (d *droppingDriver) OnPodEvent(fn func(warmpool.PodEvent)) {
	d.mu.Lock()
	d.fns = append(d.fns, fn)
	d.mu.Unlock()
	d.Driver.OnPodEvent(func(ev warmpool.PodEvent) {
		d.mu.Lock()
		lost := d.drop[ev.Pod.ID]
		d.mu.Unlock()
		if !lost {
			fn(ev)
		}
	})
}

// resync tells the event functions that events may have been missed.
func (d *droppingDriver) resync() {
	d.mu.Lock()
	fns := d.fns
	d.mu.Unlock()
	for _, fn := range fns {
		fn(warmpool.PodEvent{Resync: true})
	}
}

func (d *droppingDriver) dropEventsOf(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop[id] = true
}

// watchTicks runs every shard's watch job once per tick, the jobs' ticks spread over
// the interval as the Runner spreads them, for n intervals of the clock.
func (h *harness) watchTicks(n int) {
	h.t.Helper()
	step := sweeper.DefaultInterval / redisstore.DueShards
	for range n {
		for shard := range redisstore.DueShards {
			if err := h.sw.WatchShard(h.t.Context(), shard); err != nil {
				h.t.Fatal(err)
			}
			h.Clock.Advance(step)
		}
	}
}

// The watch of a driver with pod events keeps its view from the events: it lists the
// driver at its first run and then only at the resync (DefaultResync), however many
// ticks come between, or when the driver says it may have missed events. A driver
// without events is listed once per watch interval, the list shared by the shards'
// jobs of that interval.
func TestWatchListsOnlyAtResync(t *testing.T) {
	t.Run("pod events", func(t *testing.T) {
		var drv *droppingDriver
		h := newHarness(t, func(o *options) {
			o.driver = func(f *fake.Driver) warmpool.PodDriver {
				drv = &droppingDriver{listingDriver: &listingDriver{Driver: f}, drop: map[string]bool{}}
				return drv
			}
		})
		h.Scope("a", 40, 2)
		for i := range 20 {
			h.addPod("a", fmt.Sprintf("p%d", i), int64(i+1))
		}
		h.watchTicks(1)
		if n := drv.lists.Load(); n != 1 {
			t.Fatalf("the first interval listed the driver %d times, want once (the first resync)", n)
		}
		intervals := int(sweeper.DefaultResync/sweeper.DefaultInterval) - 2
		h.watchTicks(intervals)
		if n := drv.lists.Load(); n != 1 {
			t.Fatalf("%d intervals of ticks between resyncs listed the driver %d more times, want 0", intervals, n-1)
		}
		h.watchTicks(2) // past DefaultResync since the first list
		if n := drv.lists.Load(); n != 2 {
			t.Fatalf("the driver was listed %d times in all, want a second list at the resync", n)
		}
		drv.resync()
		h.watchTicks(1)
		if n := drv.lists.Load(); n != 3 {
			t.Fatalf("the driver was listed %d times in all, want a third list after its Resync event", n)
		}
	})
	t.Run("no pod events", func(t *testing.T) {
		var drv *listingDriver
		h := newHarness(t, func(o *options) {
			o.driver = func(f *fake.Driver) warmpool.PodDriver { drv = &listingDriver{Driver: f}; return silentDriver{drv} }
		})
		h.Scope("a", 8, 2)
		h.addPod("a", "p1", 1)
		const intervals = 10
		h.watchTicks(intervals)
		if n := drv.lists.Load(); n != intervals {
			t.Fatalf("%d intervals listed a driver without events %d times, want once per interval", intervals, n)
		}
	})
}

// A death the driver reports is buried from the event alone: no list of the driver.
func TestWatchBuriesDeathByEventWithoutList(t *testing.T) {
	var drv *listingDriver
	h := newHarness(t, func(o *options) {
		o.driver = func(f *fake.Driver) warmpool.PodDriver { drv = &listingDriver{Driver: f}; return drv }
	})
	h.Scope("a", 4, 2)
	dead := h.route("a", "s1").PodID
	h.addPod("a", "p2", 102)
	h.watchTicks(1)
	lists := drv.lists.Load()

	h.Fake.Kill(dead, "OOMKilled")
	if err := h.sw.WatchShard(t.Context(), redisstore.DueShard("a")); err != nil {
		t.Fatal(err)
	}
	s := h.Check("a", true)
	if _, ok := podState(s, dead); ok || !h.deleted(dead) {
		t.Fatalf("the pod reported dead: registered %v, deleted %v", ok, h.Fake.Deleted())
	}
	if _, ok := podState(s, "p2"); !ok {
		t.Fatal("a healthy pod was buried")
	}
	if n := drv.lists.Load() - lists; n != 0 {
		t.Fatalf("burying a reported death listed the driver %d times, want 0", n)
	}
}

// What the events missed the resync finds: a registered pod that died, and one the
// driver deleted, without an event are buried at the resync and not before; a ready
// orphan whose events were lost is adopted once the resync has shown it.
func TestWatchResyncFindsWhatEventsMissed(t *testing.T) {
	var drv *droppingDriver
	h := newHarness(t, func(o *options) {
		o.sweep.HealthFailThreshold = 1000 // the failing probes of the lost pods do not bury them first
		o.driver = func(f *fake.Driver) warmpool.PodDriver {
			drv = &droppingDriver{listingDriver: &listingDriver{Driver: f}, drop: map[string]bool{}}
			return drv
		}
	})
	h.Scope("a", 8, 2)
	ctx := t.Context()
	h.addPod("a", "killed", 1)
	h.addPod("a", "deleted", 2)
	h.watchTicks(1)
	for _, id := range []string{"killed", "deleted", "orphan"} {
		drv.dropEventsOf(id)
	}
	h.Fake.Kill("killed", "OOMKilled")
	if err := h.Fake.Delete(ctx, h.driverPod("deleted")); err != nil {
		t.Fatal(err)
	}
	h.Fake.AddExternal(h.externalPod("a", "orphan", 3))

	h.watchTicks(int(sweeper.DefaultResync/sweeper.DefaultInterval) - 2)
	s := h.Snap("a")
	for _, id := range []string{"killed", "deleted"} {
		if _, ok := podState(s, id); !ok {
			t.Fatalf("pod %s buried before the resync: its events were lost, and no list ran", id)
		}
	}
	if _, ok := podState(s, "orphan"); ok {
		t.Fatal("the orphan whose events were lost was adopted before the resync showed it")
	}

	h.watchTicks(2) // the resync
	s = h.Check("a", true)
	for _, id := range []string{"killed", "deleted"} {
		if _, ok := podState(s, id); ok {
			t.Fatalf("pod %s still registered after the resync", id)
		}
	}
	if n := h.observedCount("dead"); n != 2 {
		t.Fatalf("observed %d dead, want 2", n)
	}
	h.Clock.Advance(sweeper.DefaultOrphanGrace)
	h.watchTicks(1)
	if p, ok := podState(h.Snap("a"), "orphan"); !ok || !p.Idle {
		t.Fatalf("the orphan the resync showed was not adopted: %+v %v", p, ok)
	}
}

// lookLog sums what the watch's runs logged of the pods they looked at for probes.
type lookLog struct {
	mu     sync.Mutex
	looked int
}

func (l *lookLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lookLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lookLog) WithGroup(string) slog.Handler            { return l }
func (l *lookLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "looked" {
			l.mu.Lock()
			l.looked += int(a.Value.Int64())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *lookLog) take() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.looked
	l.looked = 0
	return n
}

// A run looks only at the pods whose probe time has come: over a probe period each
// pod is looked at once (not once per run), a run looks at no more pods than it
// probes, and a run with N pods and none due looks at none and probes none.
func TestWatchLooksOnlyAtPodsDue(t *testing.T) {
	var drv *countingDriver
	looks := &lookLog{}
	h := newHarness(t, countingProbes(&drv), func(o *options) { o.sweep.Logger = slog.New(looks) })
	const pods = 300
	h.Scope("a", 2*pods, 2)
	for i := range pods {
		h.addPod("a", fmt.Sprintf("p%d", i), int64(i+1))
	}
	ctx := t.Context()
	shard := redisstore.DueShard("a")
	run := func() (looked, probed int) {
		t.Helper()
		if err := h.sw.WatchShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		for _, n := range drv.take() {
			probed += n
		}
		return looks.take(), probed
	}
	run() // the first run looks at every pod new to the view
	period := warmpool.DefaultProbePeriodS * time.Second
	total := 0
	for i := range int(period / sweeper.DefaultInterval) {
		h.Clock.Advance(sweeper.DefaultInterval)
		looked, probed := run()
		if looked != probed {
			t.Fatalf("run %d looked at %d pods and probed %d: it looked at pods not due", i, looked, probed)
		}
		total += looked
	}
	if total != pods {
		t.Fatalf("over one probe period the runs looked at %d pods, want each of the %d once", total, pods)
	}
	if looked, probed := run(); looked != 0 || probed != 0 { // an empty window: nothing due
		t.Fatalf("a run with %d pods and none due looked at %d and probed %d, want 0 and 0", pods, looked, probed)
	}
}

package sweeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// countingDriver is the fake driver counting the probes of each pod.
type countingDriver struct {
	*fake.Driver
	mu     sync.Mutex
	probes map[string]int
}

// countingProbes makes the harness's replica probe through a countingDriver over the
// fake one, which it stores in *drv.
func countingProbes(drv **countingDriver) func(*options) {
	return func(o *options) {
		o.driver = func(f *fake.Driver) warmpool.PodDriver {
			*drv = &countingDriver{Driver: f, probes: map[string]int{}}
			return *drv
		}
	}
}

func (c *countingDriver) Probe(ctx context.Context, pod warmpool.Pod) error {
	c.mu.Lock()
	c.probes[pod.ID]++
	c.mu.Unlock()
	return c.Driver.Probe(ctx, pod)
}

// take returns the probes counted since the last take.
func (c *countingDriver) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.probes
	c.probes = map[string]int{}
	return out
}

// commandLog records the names of the commands a client sends, pipelines included.
type commandLog struct {
	mu   sync.Mutex
	cmds []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.add(c)
		}
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmd redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cmds = append(l.cmds, strings.ToLower(cmd.Name()))
}

// take returns how often each command was sent since the last take.
func (l *commandLog) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, c := range l.cmds {
		out[c]++
	}
	l.cmds = nil
	return out
}

// Each pod is probed once per its scope's probe period, the probes of many pods spread
// over the period (no tick takes much more than its share), and the probes of healthy
// pods send Redis nothing but each shard's window move, whatever the number of pods.
func TestProbesOncePerPeriodSpreadAndWriteNothing(t *testing.T) {
	var drv *countingDriver
	h := newHarness(t, countingProbes(&drv))
	ctx := t.Context()
	const tick = sweeper.DefaultInterval
	scopes := []struct {
		id     string
		pods   int
		period time.Duration
	}{{"a", 200, warmpool.DefaultProbePeriodS * time.Second}, {"b", 100, 4 * time.Second}}
	for _, sc := range scopes {
		h.Scope(sc.id, 2*sc.pods, 2, func(c *warmpool.ScopeConfig) { c.Pool.ProbePeriodS = int(sc.period / time.Second) })
		for i := range sc.pods {
			h.addPod(sc.id, fmt.Sprintf("%s-p%d", sc.id, i), int64(i+1))
		}
	}
	log := &commandLog{}
	h.client.AddHook(log)
	if err := h.sw.Watch(ctx); err != nil { // the first window: one tick back
		t.Fatal(err)
	}
	drv.take()
	log.take()

	const ticks = 20 // 40 s: 4 periods of a, 10 of b
	total := map[string]int{}
	for i := range ticks {
		h.Clock.Advance(tick)
		if err := h.sw.Watch(ctx); err != nil {
			t.Fatal(err)
		}
		perScope := map[string]int{}
		for pod, n := range drv.take() {
			total[pod] += n
			perScope[pod[:1]] += n
		}
		for _, sc := range scopes {
			share := sc.pods * int(tick) / int(sc.period)
			if got := perScope[sc.id]; got > share+share/2 {
				t.Errorf("tick %d: %d probes of scope %s, its share of a period is %d", i, got, sc.id, share)
			}
		}
		if cmds := log.take(); len(cmds) != 4 || cmds["set"] != redisstore.DueShards || cmds["smembers"] != redisstore.DueShards ||
			cmds["zremrangebyscore"] != redisstore.DueShards || cmds["zcard"] != redisstore.DueShards {
			t.Fatalf("tick %d: healthy probes sent Redis %v; want one window move (set, smembers, zremrangebyscore, zcard) per shard", i, cmds)
		}
	}
	for _, sc := range scopes {
		want := ticks * int(tick) / int(sc.period)
		for i := range sc.pods {
			if id := fmt.Sprintf("%s-p%d", sc.id, i); total[id] != want {
				t.Fatalf("pod %s probed %d times in %d periods", id, total[id], want)
			}
		}
	}
	if n := len(h.observedAll()); n != 0 {
		t.Fatalf("probes of healthy pods did something: %v", h.observedAll())
	}
}

// The count of a pod's failed probes is shared by the replicas: a pass seen by one
// resets a failure seen by another, so only failures in a row bury the pod.
func TestProbeFailuresCountAcrossReplicas(t *testing.T) {
	cfg := sweeper.Config{HealthFailThreshold: 2}
	h := newHarness(t, func(o *options) { o.sweep = cfg })
	cfg.Clock = h.Clock
	other := h.Replica(replicatest.Config{Clock: h.Clock, Sweeper: cfg}).Sweeper
	h.Scope("a", 4, 2)
	ctx := t.Context()
	h.addPod("a", "p1", 1)
	unhealthy := errors.New("health: 503")
	probe := func(sw *sweeper.Sweeper, err error) {
		t.Helper()
		h.Fake.SetProbe("p1", err)
		h.Clock.Advance(warmpool.DefaultProbePeriodS * time.Second)
		if err := sw.Watch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	alive := func() bool { _, ok := podState(h.Snap("a"), "p1"); return ok }

	probe(h.sw, unhealthy)
	probe(other, nil)
	probe(h.sw, unhealthy)
	if !alive() {
		t.Fatal("p1 buried after failures that were not in a row: the pass on the other replica did not reset the count")
	}
	probe(other, unhealthy)
	if alive() || !h.deleted("p1") {
		t.Fatalf("p1 alive %v, deleted %v after two failures in a row (threshold 2)", alive(), h.deleted("p1"))
	}
}

// A pod the driver reports dead is buried by its shard's watch job at once, without
// waiting for the job's tick or the full pass.
func TestReportedDeathRunsWatchAtOnce(t *testing.T) {
	h := newHarness(t, func(o *options) { o.sweep.Interval, o.sweep.Watch = time.Hour, time.Hour })
	h.Scope("a", 4, 2)
	h.addPod("a", "p1", 1)
	runner := sweeper.NewRunner(h.Store, h.sw.Jobs(), 0, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	h.Fake.Kill("p1", "OOMKilled")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := podState(h.Snap("a"), "p1"); !ok && h.deleted("p1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed pod is still registered 10s after its death was reported (jobs tick hourly)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.observedCount("dead"); n != 1 {
		t.Fatalf("observed %d dead, want 1", n)
	}
}

// A failing-set entry whose pod is gone is cleared also when its shard has no pod left:
// a replica that died after a failed probe left one for a pod since purged, and a
// fresh replica's watch job of that shard is not idle until its first run cleared it
// (it would otherwise be idle with nothing in its view, and the entry stay for good).
func TestWatchClearsFailingOfGonePodsInAnEmptyShard(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	shard := redisstore.DueShard("a")
	key := h.Store.Keys().Failing(shard)
	if err := h.Store.MarkFailing(ctx, redisstore.PodRef{Scope: "a", Pod: "gone"}); err != nil {
		t.Fatal(err)
	}
	runner := sweeper.NewRunner(h.Store, h.sw.Jobs(), 0, nil)
	job := func(name string) sweeper.Job {
		for _, j := range h.sw.Jobs() {
			if j.Name == name {
				return j
			}
		}
		t.Fatalf("no job %s", name)
		return sweeper.Job{}
	}
	// Another shard's run takes the replica's first list, so that what follows is the
	// shard's own idleness, not a list due.
	if _, err := runner.RunOnce(ctx, job(sweeper.WatchJobName((shard+1)%redisstore.DueShards))); err != nil {
		t.Fatal(err)
	}
	target := job(sweeper.WatchJobName(shard))
	if ran, err := runner.RunOnce(ctx, target); err != nil || !ran {
		t.Fatalf("the empty shard's first watch run: ran %v, %v; want a run", ran, err)
	}
	if left, err := h.Redis.Client.SMembers(ctx, key).Result(); err != nil || len(left) != 0 {
		t.Fatalf("failing set of shard %d after its run: %v, %v; want the gone pod's entry cleared", shard, left, err)
	}
	if ran, err := runner.RunOnce(ctx, target); err != nil || ran {
		t.Fatalf("the empty shard's next watch run: ran %v, %v; want it idle", ran, err)
	}
}

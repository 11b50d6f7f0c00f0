package sweeper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// outcomes runs jobs through a Runner and tells the outcome of each run.
type outcomes struct {
	runner *sweeper.Runner
	jobs   map[string]sweeper.Job
	last   string
}

func (h *harness) outcomes() *outcomes {
	o := &outcomes{jobs: map[string]sweeper.Job{}}
	jobs := h.sw.Jobs()
	for _, j := range jobs {
		o.jobs[j.Name] = j
	}
	o.runner = sweeper.NewRunner(h.Store, jobs, 0, nil)
	o.runner.OnRun = func(_, outcome string, _ time.Duration) { o.last = outcome }
	return o
}

// run runs the job once and returns its outcome.
func (o *outcomes) run(t *testing.T, job string) string {
	t.Helper()
	if _, err := o.runner.RunOnce(t.Context(), o.jobs[job]); err != nil {
		t.Fatalf("%s: %v", job, err)
	}
	return o.last
}

// scopeOff is a scope id of a shard other than 0 (whose due job always runs: it also
// checks that Redis kept its data).
func scopeOff() string {
	for i := 0; ; i++ {
		id := "s" + strings.Repeat("x", i)
		if redisstore.DueShard(id) != 0 {
			return id
		}
	}
}

// A due shard with no scope due takes no lock and runs nothing (outcome "idle": an
// idle replica's ticks were most of its Redis commands, 8 a tick and shard); work
// falling due makes it run again, and once done it is idle again. Shard 0's job always
// runs.
func TestIdleDueShardTakesNoLock(t *testing.T) {
	h := newHarness(t)
	o := h.outcomes()
	scope := scopeOff()
	job := sweeper.DueJobName(redisstore.DueShard(scope))
	if got := o.run(t, job); got != "idle" {
		t.Fatalf("the due job of an empty shard: %q, want idle", got)
	}
	if got := o.run(t, sweeper.DueJobName(0)); got != "ok" {
		t.Fatalf("the due job of shard 0: %q, want ok (it checks Redis's data)", got)
	}
	h.Scope(scope, 2, 1) // a publish notes work due at once
	if got := o.run(t, job); got != "ok" {
		t.Fatalf("the due job of a shard with a scope due: %q, want ok", got)
	}
	if got := o.run(t, job); got != "idle" {
		t.Fatalf("the due job of a shard whose work is done: %q, want idle", got)
	}
}

// A watch shard with no pod in the view takes no lock (outcome "idle") once it ran
// here; a pod the driver reports makes it run, and so does a resync that is due.
func TestIdleWatchShardTakesNoLock(t *testing.T) {
	h := newHarness(t)
	o := h.outcomes()
	scope := scopeOff()
	job := sweeper.WatchJobName(redisstore.DueShard(scope))
	if got := o.run(t, job); got != "ok" {
		t.Fatalf("the first watch run: %q, want ok (it lists the driver)", got)
	}
	if got := o.run(t, job); got != "idle" {
		t.Fatalf("the watch of a shard without pods: %q, want idle", got)
	}
	h.Scope(scope, 2, 1)
	h.addPod(scope, "p1", 1)
	if got := o.run(t, job); got != "ok" {
		t.Fatalf("the watch of a shard with a new pod: %q, want ok", got)
	}
	h.Clock.Advance(sweeper.DefaultOrphanGrace + time.Second) // the pod is looked up, found registered
	for i := range 2 {
		if got := o.run(t, job); got != "ok" {
			t.Fatalf("run %d of the watch of a shard with a known pod: %q, want ok (it is probed)", i+1, got)
		}
	}
	if got := o.run(t, sweeper.WatchJobName(0)); got != "ok" {
		t.Fatalf("the first watch of shard 0, without pods: %q, want ok (it clears what a dead replica may have left failing)", got)
	}
	if got := o.run(t, sweeper.WatchJobName(0)); got != "idle" {
		t.Fatalf("the watch of shard 0, without pods: %q, want idle", got)
	}
	h.Clock.Advance(sweeper.DefaultResync - sweeper.DefaultOrphanGrace)
	if got := o.run(t, sweeper.WatchJobName(0)); got != "ok" {
		t.Fatalf("the watch of shard 0 with a resync due: %q, want ok (it lists the driver)", got)
	}
}

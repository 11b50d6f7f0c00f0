package sweeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// intervals records the [start, end) of every run of a job, and whether two runs
// were ever inside it at once.
type intervals struct {
	mu      sync.Mutex
	runs    [][2]time.Time
	active  atomic.Int32
	overlap atomic.Bool
}

// job is a job that does a few Redis round trips of read-modify-write work on a
// counter key (which loses updates when two runs interleave) and records its interval.
func (iv *intervals) job(client redis.UniversalClient, counter, name string) sweeper.Job {
	return sweeper.Job{Name: name, Interval: time.Hour, Run: func(ctx context.Context) error {
		if iv.active.Add(1) > 1 {
			iv.overlap.Store(true)
		}
		start := time.Now()
		defer func() {
			end := time.Now()
			iv.active.Add(-1)
			iv.mu.Lock()
			iv.runs = append(iv.runs, [2]time.Time{start, end})
			iv.mu.Unlock()
		}()
		for range 3 {
			v, err := client.Get(ctx, counter).Int()
			if err != nil && v != 0 {
				return err
			}
			if err := client.Set(ctx, counter, v+1, 0).Err(); err != nil {
				return err
			}
		}
		return nil
	}}
}

// check fails when two recorded runs overlap.
func (iv *intervals) check(t *testing.T) int {
	t.Helper()
	iv.mu.Lock()
	runs := slices.Clone(iv.runs)
	iv.mu.Unlock()
	slices.SortFunc(runs, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	for i := 1; i < len(runs); i++ {
		if runs[i][0].Before(runs[i-1][1]) {
			t.Fatalf("runs overlap: [%s, %s) and [%s, %s)", runs[i-1][0].Format(time.StampMicro), runs[i-1][1].Format(time.StampMicro),
				runs[i][0].Format(time.StampMicro), runs[i][1].Format(time.StampMicro))
		}
	}
	if iv.overlap.Load() {
		t.Fatal("two runs were in the job at once")
	}
	return len(runs)
}

// runOnce runs j on r now, if its lock is free, and reports whether it ran; a run
// that failed fails the test.
func runOnce(t *testing.T, r *sweeper.Runner, ctx context.Context, j sweeper.Job) bool {
	t.Helper()
	ran, err := r.RunOnce(ctx, j)
	if err != nil {
		t.Errorf("job %s: %v", j.Name, err)
	}
	return ran
}

// Two runners (replicas) on one Redis, and two goroutines on each, try the same job
// over and over: it never runs twice at once, and the work it does is never lost.
func TestRunnersNeverOverlap(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	var iv intervals
	counter := h.Redis.Prefix + "test:overlap"
	var wg sync.WaitGroup
	var ran atomic.Int64
	for _, client := range []redis.UniversalClient{h.Redis.Client, h.Redis.NewClient(t)} {
		runner := sweeper.NewRunner(redisstore.NewStore(client, h.Redis.Prefix), nil, time.Second, nil)
		job := iv.job(client, counter, "overlap")
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					// A run whose lock was lost under load counts as a run as well.
					if did, _ := runner.RunOnce(ctx, job); did {
						ran.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	n := iv.check(t)
	if n == 0 || int64(n) != ran.Load() {
		t.Fatalf("%d runs recorded, %d reported", n, ran.Load())
	}
	got, err := h.Redis.Client.Get(ctx, counter).Int()
	if err != nil || got != 3*n {
		t.Fatalf("counter %d after %d runs of 3 increments: updates lost (%v)", got, n, err)
	}
	if k, _ := h.Redis.Client.Exists(ctx, h.Store.Keys().Lock("sweep:overlap")).Result(); k != 0 {
		t.Fatal("lock left held")
	}
	t.Logf("%d of 400 attempts ran", n)
}

// A holder that dies mid-job (here: its connection to Redis is cut, so it can
// neither extend nor release) blocks the job for one lease; then another runner
// takes over, and its run starts only after the dead holder's job was cancelled.
func TestRunnerTakesOverFromADeadHolder(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	const lease = 300 * time.Millisecond
	key := h.Store.Keys().Lock("sweep:work")

	deadClient := h.Redis.NewClient(t)
	dead := sweeper.NewRunner(redisstore.NewStore(deadClient, h.Redis.Prefix), nil, lease, nil)
	outcomes := make(chan string, 4)
	dead.OnRun = func(_, outcome string, _ time.Duration) { outcomes <- outcome }
	started := make(chan struct{})
	var deadEnd time.Time
	blocking := sweeper.Job{Name: "work", Interval: time.Hour, Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		deadEnd = time.Now()
		return ctx.Err()
	}}
	done := make(chan bool, 1)
	go func() { ran, _ := dead.RunOnce(context.Background(), blocking); done <- ran }()
	replicatest.Recv(t, "the job to start", started)

	alive := sweeper.NewRunner(h.Store, nil, lease, nil)
	var aliveStart time.Time
	work := sweeper.Job{Name: "work", Interval: time.Hour, Run: func(context.Context) error {
		aliveStart = time.Now()
		return nil
	}}
	if runOnce(t, alive, ctx, work) {
		t.Fatal("job ran while another runner held its lock")
	}

	// The holder is cut off: its next extension fails and its job is cancelled; its
	// lock stays until the lease runs out.
	_ = deadClient.Close()
	if !replicatest.Recv(t, "the holder's run to end", done) {
		t.Fatal("the holder's run did not count as run")
	}
	if o := replicatest.Recv(t, "the holder's outcome", outcomes); o != "lost_lock" {
		t.Fatalf("holder's outcome %q, want lost_lock", o)
	}
	if h.Redis.Mini != nil {
		// miniredis's clock stands still until told: the lease is still held.
		if runOnce(t, alive, ctx, work) {
			t.Fatal("job ran before the dead holder's lease ran out")
		}
	}
	h.passLease(key, lease)
	if !runOnce(t, alive, ctx, work) {
		t.Fatal("job did not run after the dead holder's lease ran out")
	}
	if !aliveStart.After(deadEnd) {
		t.Fatalf("the new run started at %s, before the dead holder's job ended at %s", aliveStart, deadEnd)
	}
}

// A lock taken by a "dead" holder (another token, PX lease) keeps every runner out
// until it expires, and then the job runs.
func TestRunnerWaitsOutAStaleLock(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	const lease = 300 * time.Millisecond
	key, set := h.staleLock("work", lease)
	runner := sweeper.NewRunner(h.Store, nil, lease, nil)
	var skipped, runs atomic.Int32
	runner.OnRun = func(_, outcome string, _ time.Duration) {
		if outcome == "skipped" {
			skipped.Add(1)
		}
	}
	job := sweeper.Job{Name: "work", Interval: time.Hour, Run: func(context.Context) error { runs.Add(1); return nil }}
	if runOnce(t, runner, ctx, job) {
		// On a real server the lease may have run out already under load; it must
		// have, for the job to run.
		if time.Since(set) < lease {
			t.Fatalf("job ran %s after a %s lease was taken by another holder", time.Since(set), lease)
		}
	} else {
		h.passLease(key, lease)
		if !runOnce(t, runner, ctx, job) {
			t.Fatal("job did not run after the stale lock expired")
		}
		if skipped.Load() != 1 {
			t.Fatalf("skipped %d, want 1", skipped.Load())
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("job ran %d times, want 1", runs.Load())
	}
}

// A runner whose lock is taken from it (its lease ran out and another holder got it)
// cancels its job at the next extension and leaves the other holder's lock alone.
func TestRunnerCancelsTheJobWhenItsLockIsLost(t *testing.T) {
	h := newHarness(t)
	const lease = 300 * time.Millisecond
	key := h.Store.Keys().Lock("sweep:work")
	runner := sweeper.NewRunner(h.Store, nil, lease, nil)
	outcome := make(chan string, 1)
	runner.OnRun = func(_, o string, _ time.Duration) { outcome <- o }
	started := make(chan struct{})
	job := sweeper.Job{Name: "work", Interval: time.Hour, Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}}
	go func() { _, _ = runner.RunOnce(context.Background(), job) }()
	replicatest.Recv(t, "the job to start", started)
	if err := h.Redis.Client.Set(t.Context(), key, "thief", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-outcome:
		if o != "lost_lock" {
			t.Fatalf("outcome %q, want lost_lock", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("job not cancelled after its lock was lost")
	}
	if v, _ := h.Redis.Client.Get(t.Context(), key).Result(); v != "thief" {
		t.Fatalf("lock now %q: the runner touched another holder's lock", v)
	}
}

// RunOnce hands its caller the job's own error, also when the job's lock was lost
// while it ran: a bootstrap that runs reconcile once must see that it failed.
func TestRunOnceReturnsTheJobsError(t *testing.T) {
	h := newHarness(t)
	const lease = 300 * time.Millisecond
	errBoom := errors.New("boom")
	runner := sweeper.NewRunner(h.Store, nil, lease, nil)
	ran, err := runner.RunOnce(t.Context(), sweeper.Job{Name: "fails", Interval: time.Hour, Run: func(context.Context) error { return errBoom }})
	if !ran || !errors.Is(err, errBoom) {
		t.Fatalf("a failing job: ran %v, err %v; want it run and its error", ran, err)
	}

	key := h.Store.Keys().Lock("sweep:robbed")
	started := make(chan struct{})
	robbed := sweeper.Job{Name: "robbed", Interval: time.Hour, Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return fmt.Errorf("half done: %w", errBoom)
	}}
	type result struct {
		ran bool
		err error
	}
	done := make(chan result, 1)
	go func() { ran, err := runner.RunOnce(context.Background(), robbed); done <- result{ran, err} }()
	replicatest.Recv(t, "the job to start", started)
	if err := h.Redis.Client.Set(t.Context(), key, "thief", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := replicatest.Recv(t, "the robbed job's run to end", done)
	if !r.ran || !errors.Is(r.err, errBoom) || !errors.Is(r.err, warmpool.ErrLockNotHeld) {
		t.Fatalf("a job that lost its lock: ran %v, err %v; want it run, its own error and the lost lock", r.ran, r.err)
	}
}

// Run runs every job on its ticker under its lock, and releases the locks when it
// stops.
func TestRunnerRunRunsEveryJob(t *testing.T) {
	h := newHarness(t)
	var counts [3]atomic.Int32
	var jobs []sweeper.Job
	for i := range counts {
		jobs = append(jobs, sweeper.Job{Name: "j" + strconv.Itoa(i), Interval: 5 * time.Millisecond, Run: func(context.Context) error {
			counts[i].Add(1)
			return nil
		}})
	}
	runner := sweeper.NewRunner(h.Store, jobs, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runner.Run(ctx) }()
	replicatest.WaitFor(t, "every job to run twice", func() bool {
		for i := range counts {
			if counts[i].Load() < 2 {
				return false
			}
		}
		return true
	})
	cancel()
	replicatest.Recv(t, "Run to return", done)
	for _, j := range jobs {
		if n, _ := h.Redis.Client.Exists(context.Background(), h.Store.Keys().Lock("sweep:"+j.Name)).Result(); n != 0 {
			t.Fatalf("lock of %s held after Run stopped", j.Name)
		}
	}
}

// The jobs of one interval first tick at i/n of it, not all at once: the watch jobs of
// 10,000 pods waking together took the replica's CPU from the routes (their p99 went
// from 2 to 7-17 ms).
func TestRunnerSpreadsTheJobsTicks(t *testing.T) {
	h := newHarness(t)
	const interval = 2 * time.Second
	var first [2]atomic.Int64
	var jobs []sweeper.Job
	for i := range first {
		jobs = append(jobs, sweeper.Job{Name: "spread" + strconv.Itoa(i), Interval: interval, Run: func(context.Context) error {
			first[i].CompareAndSwap(0, time.Now().UnixNano())
			return nil
		}})
	}
	runner := sweeper.NewRunner(h.Store, jobs, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); runner.Run(ctx) }()
	replicatest.WaitFor(t, "both jobs to run", func() bool { return first[0].Load() != 0 && first[1].Load() != 0 })
	cancel()
	replicatest.Recv(t, "Run to return", done)
	at0, at1 := time.Unix(0, first[0].Load()), time.Unix(0, first[1].Load())
	if at0.Sub(start) < interval/2-50*time.Millisecond {
		t.Errorf("the first of two jobs first ran %v after the start, want about half its interval (%v)", at0.Sub(start), interval/2)
	}
	if gap := at1.Sub(at0); gap < interval/4 {
		t.Errorf("the second job first ran %v after the first, want about half the interval (%v) apart", gap, interval/2)
	}
}

// Package sweeper runs the background jobs that keep pools healthy: the due jobs (one
// per shard of the due index: session expiry, leftovers, reclaim and autoscale of the
// scopes with work due), watch, and reconcile, the slow full pass. Each job runs under
// its own lease lock, so one replica runs it per tick while every replica serves
// requests, and the replicas share the shards.
package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// DefaultLockLease is how long a crashed job holder blocks the job on other replicas.
const DefaultLockLease = 15 * time.Second

// Job is one periodic job.
type Job struct {
	Name     string
	Interval time.Duration
	// Wake, when set, runs the job between its ticks: a receive on it is a run.
	Wake <-chan struct{}
	// Idle, when set, is asked before the job's lock is taken: a job that has nothing
	// to do (true) is not run and takes no lock, a run of outcome "idle". It reads
	// less than the lock costs (an idle replica's ticks are most of its Redis
	// commands) and answers false when it cannot tell.
	Idle func(ctx context.Context) bool
	Run  func(ctx context.Context) error
}

// Runner runs jobs on their tickers, each only while holding its lock.
type Runner struct {
	store Locks
	jobs  []Job
	lease time.Duration
	log   *slog.Logger
	// OnRun, when set, is told each run of a job with its outcome ("ok", "idle",
	// "error", "lost_lock", "skipped") and how long it held the job's lock (zero when
	// idle or skipped).
	OnRun func(job, outcome string, held time.Duration)
}

// jobKey is the context key of the name of the job a context runs.
type jobKey struct{}

// jobName is the name of the job ctx runs under a Runner, "" outside one.
func jobName(ctx context.Context) string {
	name, _ := ctx.Value(jobKey{}).(string)
	return name
}

// NewRunner returns a Runner of jobs whose locks are leases of lease (DefaultLockLease
// when zero).
func NewRunner(store Locks, jobs []Job, lease time.Duration, log *slog.Logger) *Runner {
	if lease <= 0 {
		lease = DefaultLockLease
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{store: store, jobs: jobs, lease: lease, log: log.With("component", "sweeper"), OnRun: func(string, string, time.Duration) {}}
}

// Run runs every job on its ticker until ctx ends; a job run in progress is cancelled
// and its lock released. The jobs' ticks are spread evenly over their interval (the
// i-th of n jobs first ticks i/n of its interval after the start), so that the jobs
// of one interval, a due and a watch job per shard, do not all wake at once and take
// the replica's CPU from the requests together.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, j := range r.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := time.NewTimer(j.Interval * time.Duration(i+1) / time.Duration(len(r.jobs)))
			tick(ctx, first, j.Interval, j.Wake, func(ctx context.Context) {
				_, _ = r.RunOnce(ctx, j) // logged and counted (OnRun) there
			})
		}()
	}
	wg.Wait()
}

// Every calls f every d until ctx ends, the first time d after the start: the
// periodic work of each replica that takes no lock (the due index's retries, the
// server's clock checks).
func Every(ctx context.Context, d time.Duration, f func(context.Context)) {
	tick(ctx, time.NewTimer(d), d, nil, f)
}

// tick calls f each time t fires, then every d, and each time wake receives (a nil
// wake never does), until ctx ends; it stops t.
func tick(ctx context.Context, t *time.Timer, d time.Duration, wake <-chan struct{}, f func(context.Context)) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(d)
		case <-wake:
		}
		f(ctx)
	}
}

// RunOnce runs one job now if it has work (Job.Idle) and its lock is free: the lock is
// kept alive while the job runs, the job's context is cancelled when the lock is lost,
// and the lock is released at the end. It reports whether the job ran, and the job's
// own error: when the lock was lost too, that error joined with the loss
// (warmpool.ErrLockNotHeld).
func (r *Runner) RunOnce(ctx context.Context, j Job) (bool, error) {
	if j.Idle != nil && j.Idle(ctx) {
		r.OnRun(j.Name, "idle", 0)
		return false, nil
	}
	lock, err := r.store.Obtain(ctx, r.store.Keys().Lock("sweep:"+j.Name), r.lease)
	if err != nil {
		if !errors.Is(err, warmpool.ErrNotObtained) {
			r.log.DebugContext(ctx, "job lock not obtained", "job", j.Name, "err", err)
		}
		r.OnRun(j.Name, "skipped", 0)
		return false, nil
	}
	held := time.Now()
	jctx, stop := lock.KeepAlive(context.WithValue(ctx, jobKey{}, j.Name))
	err = j.Run(jctx)
	outcome := "ok"
	if lerr := stop(); lerr != nil {
		outcome = "lost_lock"
		err = errors.Join(err, lerr)
		r.log.WarnContext(ctx, "job lock lost; the job was cancelled", "job", j.Name, "err", err)
	} else {
		release, cancel := redisstore.CleanupContext(ctx)
		if rerr := lock.Release(release); rerr != nil {
			r.log.DebugContext(ctx, "job lock not released; it expires", "job", j.Name, "err", rerr)
		}
		cancel()
		if err != nil {
			outcome = "error"
			r.log.WarnContext(ctx, "job failed", "job", j.Name, "err", err)
		}
	}
	r.OnRun(j.Name, outcome, time.Since(held))
	return true, err
}

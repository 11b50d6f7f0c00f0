// Package sweeper runs the background jobs that keep pools healthy: autoscale, reclaim,
// watch, reconcile and session expiry. Each job runs under its own lease lock, so one
// replica runs it per tick while every replica serves requests.
package sweeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool/lua"
)

// DefaultLockLease is how long a crashed job holder blocks the job on other replicas.
const DefaultLockLease = 15 * time.Second

// Job is one periodic job.
type Job struct {
	Name     string
	Interval time.Duration
	Run      func(ctx context.Context) error
}

// Runner runs jobs on their tickers, each only while holding its lock.
type Runner struct {
	store *lua.Store
	jobs  []Job
	lease time.Duration
	log   *slog.Logger
	token string
	// runs numbers the runs, so that each holds its lock under a token of its own: the
	// lock script renews for the same token, which would let two runs of one job in
	// this runner (RunOnce called while Run runs it) share the lock.
	runs atomic.Uint64
	// OnRun, when set, is told each run of a job with its outcome ("ok", "error",
	// "lost_lock", "skipped").
	OnRun func(job, outcome string)
}

// NewRunner returns a Runner of jobs whose locks are leases of lease (DefaultLockLease
// when zero), each run holding its lock under a token unique to the run.
func NewRunner(store *lua.Store, jobs []Job, lease time.Duration, log *slog.Logger) *Runner {
	if lease <= 0 {
		lease = DefaultLockLease
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return &Runner{store: store, jobs: jobs, lease: lease, log: log.With("component", "sweeper"), token: hex.EncodeToString(b[:]), OnRun: func(string, string) {}}
}

// Run runs every job on its ticker until ctx ends; a job run in progress is cancelled
// and its lock released.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, j := range r.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(j.Interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				r.RunOnce(ctx, j)
			}
		}()
	}
	wg.Wait()
}

// RunOnce runs one job now if its lock is free: the lock is extended every lease/3
// while the job runs, the job's context is cancelled when an extension fails, and the
// lock is released at the end. It reports whether the job ran.
func (r *Runner) RunOnce(ctx context.Context, j Job) bool {
	key := r.store.Keys().Lock("sweep:" + j.Name)
	token := r.token + ":" + strconv.FormatUint(r.runs.Add(1), 10)
	ok, err := r.store.ObtainLock(ctx, key, token, r.lease)
	if err != nil || !ok {
		if err != nil {
			r.log.Debug("job lock not obtained", "job", j.Name, "err", err)
		}
		r.OnRun(j.Name, "skipped")
		return false
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if ok, err := r.store.ExtendLock(jctx, key, token, r.lease); err != nil || !ok {
				r.log.Warn("job lock lost; cancelling the job", "job", j.Name, "err", err)
				close(lost)
				cancel()
				return
			}
		}
	}()
	err = j.Run(jctx)
	close(done)
	wg.Wait()
	outcome := "ok"
	select {
	case <-lost:
		outcome = "lost_lock"
	default:
		release, rc := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, rerr := r.store.ReleaseLock(release, key, token); rerr != nil {
			r.log.Debug("job lock not released; it expires", "job", j.Name, "err", rerr)
		}
		rc()
		if err != nil {
			outcome = "error"
			r.log.Warn("job failed", "job", j.Name, "err", err)
		}
	}
	r.OnRun(j.Name, outcome)
	return true
}

package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/scopes"
)

// Defaults of Config.
const (
	DefaultInterval            = 2 * time.Second
	DefaultHealthFailThreshold = 3
	DefaultGhostGrace          = 30 * time.Second
	DefaultOrphanGrace         = 60 * time.Second
	DefaultExpiryBatch         = 1000
	DefaultRepairEvery         = 10
	// DefaultReconcile: the full pass over every scope, an audit of what the events and
	// the due jobs keep right, runs this often.
	DefaultReconcile = time.Hour
	// DefaultDueBatch bounds the scopes one tick of a shard looks at.
	DefaultDueBatch = 1000
	// DefaultPassDuty: the full pass works a tenth of its wall time.
	DefaultPassDuty = 0.1
	noteTTL         = 30 * time.Second
)

// Config tunes the jobs; zero fields take the defaults.
type Config struct {
	// Interval is the tick of the due jobs, which look at the scopes with sweep work
	// due (sessions and holds past their expiry, leftovers past their deadlines, idle
	// pods past pod_ttl_s or of an old deploy_ver, pools below min_idle_pods), and the
	// default interval of watch.
	Interval time.Duration
	// Watch is the interval of the watch jobs (dead pods and health probes; each pod
	// is probed once per its scope's pool.probe_period_s, at its own offset).
	Watch time.Duration
	// Resync is how often the watch lists a driver that reports its pods' events
	// (warmpool.PodNotifier), whose view it otherwise keeps from the events alone, as
	// an informer's resync; it also lists at its first run and when the driver may
	// have missed events. DefaultResync when zero.
	Resync time.Duration
	// Reconcile is the interval of the full pass over every scope, an audit: reconcile
	// with the driver and the config store, and every scope's due time computed again
	// (the safety net of the due index). What it fixes, the driver's pod events, the
	// config store's changes and the scripts' due notes should have fixed already: it
	// logs the count by fix once per pass (OnFix is told each). DefaultReconcile when
	// zero.
	Reconcile time.Duration
	// PassDuty paces the full pass run as a job: the share of its wall time it works.
	// After each scope it waits (1-PassDuty)/PassDuty times as long as the scope took,
	// so it keeps at most PassDuty of a core (and of Redis) busy on any machine and
	// lasts 1/PassDuty times its work; a pass longer than Reconcile is followed at once
	// by the next. A pass that rebuilds a keyspace that lost its data runs flat out.
	// DefaultPassDuty when zero; 1 or more: flat out.
	PassDuty float64
	// DueBatch bounds the scopes one tick of a shard looks at.
	DueBatch int
	// HealthFailThreshold is how many probes in a row a pod may fail before it is
	// buried.
	HealthFailThreshold int
	// GhostGrace: a pod registered this recently is not purged for missing from the
	// driver's list, which may lag behind (an informer cache).
	GhostGrace time.Duration
	// OrphanGrace: a pod the driver has but Redis does not know is left alone this
	// long while it is not ready (it may be a deploy that is about to register).
	OrphanGrace time.Duration
	// ExpiryBatch bounds the sessions evicted per scope and script call.
	ExpiryBatch int
	// RepairEvery: reconcile recomputes the slot counts (reading every session) on
	// its first run and then every RepairEvery-th run; 1 = every run. Expired
	// leftovers go on every run.
	RepairEvery int
	Clock       warmpool.Clock
	Logger      *slog.Logger
	// Observe, when set, is told what the jobs did (event "sweep", outcome e.g.
	// "reclaimed", "adopted", "purged_ghost").
	Observe func(event, outcome string)
	// OnFix, when set, is told each repair a job made: the job's name (empty when the
	// job did not run under a Runner) and the fix (the outcome of the "sweep" event).
	// It must not block.
	OnFix func(job, fix string)
	// Tenants, when set, is where the config feed takes tenants' quotas (SPEC
	// §12.1): each tenant written by any replica is published on this one, and every
	// tenant once when the feed starts.
	Tenants Tenants
}

// Tenants is what the config feed needs of the tenant service (tenants.Service).
type Tenants interface {
	// Changed publishes what the config store holds now for the tenant. Errors:
	// STORE_UNAVAILABLE.
	Changed(ctx context.Context, tenant string) error
	// PublishAll publishes every tenant with quotas and returns how many. Errors:
	// STORE_UNAVAILABLE.
	PublishAll(ctx context.Context) (int, error)
	// Balance makes every tenant's scopes governed by its quotas and takes back the
	// allowance they do not use (the tenants job). Errors: STORE_UNAVAILABLE.
	Balance(ctx context.Context) error
}

// TenantsJobName is the name of the job that balances the tenants' quotas.
const TenantsJobName = "tenants"

// Pools is what the jobs need of the resource manager (rm.Manager).
type Pools interface {
	// Fill starts warm-pool deploys of the scope while it has fewer idle pods of its
	// current version than min_idle_pods, within max_pods and the parallel-deploy
	// bound, and returns how many it started. Errors: SCOPE_NOT_FOUND,
	// STORE_UNAVAILABLE.
	Fill(ctx context.Context, scope string) (int, error)
	// Drain deletes the idle retired pods of a scope (a deleted scope's), and forgets
	// the scope's keys when it is deleted and nothing of it is left. It returns how
	// many pods it deleted. Errors: STORE_UNAVAILABLE.
	Drain(ctx context.Context, scope string, force bool) (int, error)
	// DeleteScope deletes a scope in Redis that the config store has deleted at
	// version. Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
	DeleteScope(ctx context.Context, scope string, version int64, force bool) (int, error)
}

// Sessions is what the jobs need of the session manager (sm.Manager).
type Sessions interface {
	// ExpireSessions evicts up to limit sessions of the scope whose TTL has passed,
	// frees their slots, wakes waiters, and returns how many it evicted. Errors:
	// SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
	ExpireSessions(ctx context.Context, scope string, limit int) (int, error)
	// Wake tells the scope's waiters on every replica that capacity may have freed;
	// a failed publish only delays them until their next re-check.
	Wake(ctx context.Context, scope string)
}

// Sweeper holds the jobs that keep every scope's pool healthy.
type Sweeper struct {
	store    State
	pools    Pools
	sessions Sessions
	driver   warmpool.PodDriver
	configs  warmpool.ConfigStore
	scopes   *scopes.Service // publishes stored configs, finishes stored deletes
	cfg      Config
	clock    warmpool.Clock
	log      *slog.Logger
	// reconciles counts Repair calls, to run the recount every RepairEvery-th.
	reconciles atomic.Uint64
	watch      *watchState
	// paceNow and paceWait time the full pass's steps and wait out its pace: the wall
	// clock (not Clock: the pace is of real work) and a timer.
	paceNow  func() time.Time
	paceWait func(ctx context.Context, d time.Duration) error
}

// fill gives every field left out its default; a job's interval defaults to Interval.
func (c *Config) fill() {
	c.Clock, c.Logger, c.Observe = defaults.Clock(c.Clock), defaults.Logger(c.Logger), defaults.Observer(c.Observe)
	if c.OnFix == nil {
		c.OnFix = func(string, string) {}
	}
	defaults.Positive(&c.HealthFailThreshold, DefaultHealthFailThreshold)
	defaults.Positive(&c.GhostGrace, DefaultGhostGrace)
	defaults.Positive(&c.OrphanGrace, DefaultOrphanGrace)
	defaults.Positive(&c.ExpiryBatch, DefaultExpiryBatch)
	defaults.Positive(&c.RepairEvery, DefaultRepairEvery)
	defaults.Positive(&c.DueBatch, DefaultDueBatch)
	defaults.Positive(&c.Interval, DefaultInterval)
	defaults.Positive(&c.Watch, c.Interval)
	defaults.Positive(&c.Reconcile, DefaultReconcile)
	defaults.Positive(&c.Resync, DefaultResync)
	defaults.Positive(&c.PassDuty, DefaultPassDuty)
}

// New returns the jobs over the given parts of a replica: its Redis, the resource and
// session managers (as Pools and Sessions), the pod driver and the config store.
func New(store State, pools Pools, sessions Sessions, driver warmpool.PodDriver, configs warmpool.ConfigStore, cfg Config) *Sweeper {
	cfg.fill()
	s := &Sweeper{store: store, pools: pools, sessions: sessions, driver: driver, configs: configs, cfg: cfg, clock: cfg.Clock,
		log: cfg.Logger.With("component", "sweeper"), watch: newWatchState(), paceNow: time.Now, paceWait: sleep}
	s.scopes = scopes.New(configs, store, pools, cfg.Logger, cfg.Observe)
	if n, ok := driver.(warmpool.PodNotifier); ok {
		n.OnPodEvent(s.watch.event)
	}
	return s
}

// ReconcileJob is the full pass, an audit: reconcile (which also rebuilds a keyspace
// that lost its data), then every scope's due time computed again, paced to PassDuty.
// It logs one line per pass with what it had to fix, by fix: a number that should be
// 0, for the events and the due notes fix it first.
func (s *Sweeper) ReconcileJob() Job {
	return Job{Name: "reconcile", Interval: s.cfg.Reconcile, Run: func(ctx context.Context) error {
		started := s.paceNow()
		fixes := &passFixes{by: map[string]int{}}
		ctx = context.WithValue(ctx, passFixesKey{}, fixes)
		p := s.newPacer()
		err := errors.Join(s.reconcile(ctx, p), s.reindex(ctx, p))
		s.logPass(ctx, fixes, s.paceNow().Sub(started), err)
		return err
	}}
}

// passFixes counts the fixes of one full pass, by fix.
type passFixes struct {
	mu sync.Mutex
	by map[string]int
}

type passFixesKey struct{}

// logPass writes the pass's one line: the fixes by fix, at warning level when there
// were any.
func (s *Sweeper) logPass(ctx context.Context, fixes *passFixes, took time.Duration, err error) {
	fixes.mu.Lock()
	defer fixes.mu.Unlock()
	total := 0
	names := make([]string, 0, len(fixes.by))
	for fix, n := range fixes.by {
		total += n
		names = append(names, fix)
	}
	sort.Strings(names)
	attrs := []any{"fixes", total, "took", took.Round(time.Millisecond)}
	for _, fix := range names {
		attrs = append(attrs, "fix_"+fix, fixes.by[fix])
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	level := slog.LevelInfo
	if total > 0 || err != nil {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "full pass (audit) done", attrs...)
}

// DueJobName is the name of the due job of a shard of the due index (its lease is
// the job lock of that name).
func DueJobName(shard int) string { return "due:" + strconv.Itoa(shard) }

// Jobs lists the jobs with their intervals, for a Runner: the full pass, and one due
// job and one watch job per shard of the due index, each under its own lease, so that
// replicas share the shards. A shard's watch job also runs as soon as the driver
// reports a death in the shard.
func (s *Sweeper) Jobs() []Job {
	jobs := []Job{s.ReconcileJob()}
	for shard := range redisstore.DueShards {
		due := Job{Name: DueJobName(shard), Interval: s.cfg.Interval, Run: func(ctx context.Context) error {
			return s.SweepShard(ctx, shard)
		}}
		if shard != 0 { // shard 0's job also checks that Redis kept its data
			due.Idle = func(ctx context.Context) bool { return s.dueIdle(ctx, shard) }
		}
		jobs = append(jobs, due)
	}
	for shard := range redisstore.DueShards {
		jobs = append(jobs, Job{Name: WatchJobName(shard), Interval: s.cfg.Watch, Wake: s.watch.wake[shard],
			Idle: func(context.Context) bool { return s.watchIdle(shard) },
			Run: func(ctx context.Context) error {
				return s.WatchShard(ctx, shard)
			}})
	}
	if s.cfg.Tenants != nil {
		jobs = append(jobs, Job{Name: TenantsJobName, Interval: s.cfg.Interval, Run: s.cfg.Tenants.Balance})
	}
	return jobs
}

// dueIdle reports whether no scope of a shard is due now (one read; a failed read is
// not idle: the job runs and meets the error).
func (s *Sweeper) dueIdle(ctx context.Context, shard int) bool {
	ids, err := s.store.DueScopes(ctx, shard, s.clock.Now(), 1)
	return err == nil && len(ids) == 0
}

// SweepShard looks at the scopes of one shard of the due index whose sweep work is due
// (DueBatch at most) and does it: expired sessions and holds, expired leftovers, idle
// pods to reclaim, warm pods to deploy; then it sets each scope's next due time. The
// job of shard 0 also checks that Redis still has its data, and rebuilds it when not.
func (s *Sweeper) SweepShard(ctx context.Context, shard int) error {
	if shard == 0 {
		live, err := s.store.EpochLive(ctx)
		if err != nil {
			return err
		}
		if !live {
			return s.Rebuild(ctx)
		}
	}
	now := s.clock.Now()
	ids, err := s.store.DueScopes(ctx, shard, now, s.cfg.DueBatch)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.sweepScope(ctx, id, now); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// sweepScope does a scope's due work and sets its next due time, which it does even
// after an error: work left undone keeps the scope due.
func (s *Sweeper) sweepScope(ctx context.Context, scope string, now time.Time) error {
	err := s.expireScope(ctx, scope)
	if err == nil {
		_, err = s.store.ScopeRepair(ctx, scope, now, now.Add(noteTTL), false)
	}
	if err == nil {
		err = s.reclaimScope(ctx, scope, now)
	}
	if err == nil {
		err = s.fillScope(ctx, scope)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, _, derr := s.store.ScopeDue(ctx, scope, s.clock.Now()); derr != nil {
		err = errors.Join(err, derr)
	}
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return nil
	}
	return err
}

// retryDueIndex writes again, every Interval until ctx ends, the due-index entries
// whose write after a script's due note failed on this replica
// (redisstore.Store.RetryDueIndex): each replica remembers its own, so each retries them,
// whoever holds the due jobs' leases. A lost write is so repaired a tick after Redis
// answers again, not by the full pass an hour later; only a replica that dies between
// a script and its write leaves the entry to the full pass.
func (s *Sweeper) retryDueIndex(ctx context.Context) {
	Every(ctx, s.cfg.Interval, func(ctx context.Context) {
		if err := s.store.RetryDueIndex(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "due index: writes that failed are not written yet; trying again next tick", "err", err)
		}
	})
}

// Reindex computes every scope's due time again from its state and indexes it: the
// safety net of the due index, which a replica that died between a script and its
// index write leaves behind.
func (s *Sweeper) Reindex(ctx context.Context) error { return s.reindex(ctx, nil) }

func (s *Sweeper) reindex(ctx context.Context, p *pacer) error {
	return s.forScopes(ctx, p, func(scope string) error {
		fixed, err := s.store.ScopeReindex(ctx, scope, s.clock.Now())
		if fixed {
			s.log.InfoContext(ctx, "reindex: the scope's due time was missing from the due index, or later than its work", "scope", scope)
			s.fixed(ctx, "reindexed")
		}
		return err
	})
}

// forScopes runs fn for every published scope, on until every scope was tried, each
// after p's wait for what came before.
func (s *Sweeper) forScopes(ctx context.Context, p *pacer, fn func(scope string) error) error {
	ids, err := s.store.ScopeIDs(ctx)
	if err != nil {
		return err
	}
	sort.Strings(ids)
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := p.step(ctx); err != nil {
			return err
		}
		if err := fn(id); err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// pool reads a scope's published record (a deleted scope's too) and a snapshot of its
// pool.
func (s *Sweeper) pool(ctx context.Context, scope string) (redisstore.ScopeRecord, redisstore.Snapshot, error) {
	rec, err := s.store.ScopeAny(ctx, scope)
	if err != nil {
		return redisstore.ScopeRecord{}, redisstore.Snapshot{}, err
	}
	snap, err := s.store.PoolSnapshot(ctx, scope)
	return rec, snap, err
}

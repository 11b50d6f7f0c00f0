package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/lua"
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
	// DefaultFullPassTicks: reconcile, the full pass over every scope, runs every this
	// many Intervals (5 minutes at the default Interval).
	DefaultFullPassTicks = 150
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
	// Reconcile is the interval of the full pass over every scope: reconcile with the
	// driver and the config store, and every scope's due time computed again (the
	// safety net of the due index); DefaultFullPassTicks Intervals when zero.
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
}

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
	store    *lua.Store
	pools    Pools
	sessions Sessions
	driver   warmpool.PodDriver
	configs  warmpool.ConfigStore
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
	defaults.Positive(&c.Reconcile, DefaultFullPassTicks*c.Interval)
	defaults.Positive(&c.PassDuty, DefaultPassDuty)
}

// New returns the jobs over the given parts of a replica: its Redis, the resource and
// session managers (as Pools and Sessions), the pod driver and the config store.
func New(store *lua.Store, pools Pools, sessions Sessions, driver warmpool.PodDriver, configs warmpool.ConfigStore, cfg Config) *Sweeper {
	cfg.fill()
	s := &Sweeper{store: store, pools: pools, sessions: sessions, driver: driver, configs: configs, cfg: cfg, clock: cfg.Clock,
		log: cfg.Logger.With("component", "sweeper"), watch: newWatchState(), paceNow: time.Now, paceWait: sleep}
	if n, ok := driver.(warmpool.DeathNotifier); ok {
		n.OnDeath(s.watch.report)
	}
	return s
}

// ReconcileJob is the full pass: reconcile (which also rebuilds a keyspace that lost
// its data), then every scope's due time computed again, paced to PassDuty.
func (s *Sweeper) ReconcileJob() Job {
	return Job{Name: "reconcile", Interval: s.cfg.Reconcile, Run: func(ctx context.Context) error {
		p := s.newPacer()
		return errors.Join(s.reconcile(ctx, p), s.reindex(ctx, p))
	}}
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
	for shard := range lua.DueShards {
		jobs = append(jobs, Job{Name: DueJobName(shard), Interval: s.cfg.Interval, Run: func(ctx context.Context) error {
			return s.SweepShard(ctx, shard)
		}})
	}
	for shard := range lua.DueShards {
		jobs = append(jobs, Job{Name: WatchJobName(shard), Interval: s.cfg.Watch, Wake: s.watch.wake[shard], Run: func(ctx context.Context) error {
			return s.WatchShard(ctx, shard)
		}})
	}
	return jobs
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

// Reindex computes every scope's due time again from its state and indexes it: the
// safety net of the due index, which a replica that died between a script and its
// index write leaves behind.
func (s *Sweeper) Reindex(ctx context.Context) error { return s.reindex(ctx, nil) }

func (s *Sweeper) reindex(ctx context.Context, p *pacer) error {
	return s.forScopes(ctx, p, func(scope string) error {
		_, _, err := s.store.ScopeDue(ctx, scope, s.clock.Now())
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
func (s *Sweeper) pool(ctx context.Context, scope string) (lua.ScopeRecord, lua.Snapshot, error) {
	rec, err := s.store.ScopeAny(ctx, scope)
	if err != nil {
		return lua.ScopeRecord{}, lua.Snapshot{}, err
	}
	snap, err := s.store.PoolSnapshot(ctx, scope)
	return rec, snap, err
}

// Autoscale keeps min_idle_pods warm idle pods of the current version in every scope,
// within max_pods and the parallel-deploy bound (the placeholder script decides).
func (s *Sweeper) Autoscale(ctx context.Context) error {
	return s.forScopes(ctx, nil, func(scope string) error { return s.fillScope(ctx, scope) })
}

func (s *Sweeper) fillScope(ctx context.Context, scope string) error {
	n, err := s.pools.Fill(ctx, scope)
	if n > 0 {
		s.log.InfoContext(ctx, "autoscale: deploying warm pods", "scope", scope, "count", n)
		for range n {
			s.fixed(ctx, "autoscale_deploy")
		}
	}
	return err
}

// Reclaim deletes idle pods of an old deploy_ver (or retired: of the scope's deleted
// life) and idle pods beyond max_pods at once, and idle pods idle for pod_ttl_s or
// longer beyond the newest min_idle_pods; a deleted scope's idle pods all go, and its keys once none is left. A
// pod that got a session since it was looked at is left alone (the purge re-checks its
// idle time atomically).
func (s *Sweeper) Reclaim(ctx context.Context) error {
	now := s.clock.Now()
	return s.forScopes(ctx, nil, func(scope string) error { return s.reclaimScope(ctx, scope, now) })
}

func (s *Sweeper) reclaimScope(ctx context.Context, scope string, now time.Time) error {
	rec, snap, err := s.pool(ctx, scope)
	if err != nil {
		return err
	}
	if rec.Deleted {
		n, err := s.pools.Drain(ctx, scope, false)
		for range n {
			s.fixed(ctx, "reclaimed")
		}
		return err
	}
	// Pods beyond max_pods (a class B change lowered it) go as they idle: the pods of
	// another version count first, then the current version's idle pods, the first to
	// go idle first (surplus_pods in lua/_lib.lua, which keeps them from new sessions).
	excess := len(snap.Pods) - rec.Config.Pool.MaxPods()
	var current []lua.PodState
	for _, p := range snap.Pods {
		old := p.Retired || p.Draining || p.Pod.DeployVer != rec.DeployVer
		if old {
			excess--
		}
		switch {
		case !p.Idle:
		case p.Retired:
			s.retire(ctx, scope, p, "retired: its last session ended under recycle delete, or it is of the scope's deleted life")
		case p.Draining:
			s.retire(ctx, scope, p, "drained: its agent reported that it drains")
		case old:
			s.retire(ctx, scope, p, "old deploy_ver "+p.Pod.DeployVer)
		default:
			current = append(current, p)
		}
	}
	sort.Slice(current, func(i, j int) bool {
		if !current[i].IdleSince.Equal(current[j].IdleSince) {
			return current[i].IdleSince.Before(current[j].IdleSince)
		}
		return current[i].Pod.ID < current[j].Pod.ID
	})
	for excess > 0 && len(current) > 0 {
		s.retire(ctx, scope, current[0], "beyond max_pods")
		current, excess = current[1:], excess-1
	}
	// The newest idle pods are the min_idle_pods kept warm.
	slices.Reverse(current)
	ttl := time.Duration(rec.Config.Pool.PodTTLS) * time.Second
	for i, p := range current {
		if i >= rec.Config.Pool.MinIdlePods && now.Sub(p.IdleSince) >= ttl {
			s.retire(ctx, scope, p, "idle past pod_ttl_s")
		}
	}
	return nil
}

// retire takes an idle pod out of the pool, if it is still idle since the same time,
// then deletes it.
func (s *Sweeper) retire(ctx context.Context, scope string, p lua.PodState, reason string) {
	since := p.IdleSince
	if _, err := s.store.PodPurge(ctx, scope, p.Pod.ID, reason, &since); err != nil {
		if !errors.Is(err, lua.ErrPodBusy) {
			s.log.WarnContext(ctx, "reclaim: purge failed", "scope", scope, "pod", p.Pod.ID, "err", err)
		}
		return
	}
	if err := s.driver.Delete(ctx, p.Pod); err != nil {
		s.log.WarnContext(ctx, "reclaim: delete failed; reconcile deletes the orphan", "scope", scope, "pod", p.Pod.ID, "err", err)
	}
	s.log.InfoContext(ctx, "reclaimed", "scope", scope, "pod", p.Pod.ID, "reason", reason)
	s.fixed(ctx, "reclaimed")
}

// fixed reports a repair made by the job running under ctx.
func (s *Sweeper) fixed(ctx context.Context, fix string) {
	s.cfg.Observe("sweep", fix)
	s.cfg.OnFix(jobName(ctx), fix)
}

// bury forgets a dead pod (its sessions are released; the gateway learns on its next
// touch), deletes it, and wakes the scope's waiters: capacity under max_pods freed.
func (s *Sweeper) bury(ctx context.Context, scope string, pod warmpool.Pod, reason, outcome string) {
	sessions, err := s.store.PodPurge(ctx, scope, pod.ID, reason, nil)
	if err != nil {
		s.log.WarnContext(ctx, "purge failed", "scope", scope, "pod", pod.ID, "err", err)
		return
	}
	if err := s.driver.Delete(ctx, pod); err != nil {
		s.log.WarnContext(ctx, "delete failed; reconcile deletes the orphan", "scope", scope, "pod", pod.ID, "err", err)
	}
	s.log.InfoContext(ctx, "pod buried", "scope", scope, "pod", pod.ID, "reason", reason, "sessions_released", len(sessions))
	s.fixed(ctx, outcome)
	s.sessions.Wake(ctx, scope)
}

// listPods lists the driver's pods, first naming every stored scope's namespace to a
// driver that lists only the namespaces it knows of: after a restart its List would
// otherwise miss live pods, and reconcile would take them for ghosts.
func (s *Sweeper) listPods(ctx context.Context) ([]warmpool.Pod, error) {
	if _, ok := s.driver.(warmpool.NamespaceWatcher); ok {
		all, err := s.configs.List(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.watchNamespaces(ctx, all); err != nil {
			return nil, err
		}
	}
	return s.driver.List(ctx)
}

// watchNamespaces names the namespace of every scope of stored to a driver that lists
// only the namespaces it knows of; it does nothing for other drivers.
func (s *Sweeper) watchNamespaces(ctx context.Context, stored []warmpool.StoredConfig) error {
	w, ok := s.driver.(warmpool.NamespaceWatcher)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for _, c := range stored {
		if ns := c.Config.Deploy.Namespace; !seen[ns] {
			seen[ns] = true
			if err := w.WatchNamespace(ctx, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// ExpireSessions evicts sessions past session_ttl_s in every scope and wakes waiters.
func (s *Sweeper) ExpireSessions(ctx context.Context) error {
	return s.forScopes(ctx, nil, func(scope string) error { return s.expireScope(ctx, scope) })
}

func (s *Sweeper) expireScope(ctx context.Context, scope string) error {
	total := 0
	for {
		n, err := s.sessions.ExpireSessions(ctx, scope, s.cfg.ExpiryBatch)
		total += n
		if err != nil || n < s.cfg.ExpiryBatch {
			if total > 0 {
				s.fixed(ctx, "sessions_expired")
			}
			return err
		}
	}
}

// Reconcile makes Redis agree with the config store and the driver, the ground truths
// for configs and pods: a Redis that lost its data is rebuilt; a scope whose stored
// config is newer than the published one (or missing) is published again; labelled
// pods Redis does not know are adopted (ready, of the current version, within
// max_pods) or deleted; pods Redis knows but the driver lacks are purged; expired
// leases, room entries, claims and waiters go; and every derived count is recomputed
// from the sessions and claims. It runs flat out; the job paces it.
func (s *Sweeper) Reconcile(ctx context.Context) error { return s.reconcile(ctx, nil) }

func (s *Sweeper) reconcile(ctx context.Context, p *pacer) error {
	failover, err := s.store.CheckFailover(ctx)
	if err != nil {
		return err
	}
	if failover {
		s.log.WarnContext(ctx, "redis serves another replication history than the pool was built on (a failover, or a restart from disk): rebuilding")
		s.cfg.Observe("sweep", "failover")
	}
	live, err := s.store.EpochLive(ctx)
	if err != nil {
		return err
	}
	if !live {
		// Until the due index is rebuilt too, no scope's due work is found.
		p.flatOut()
		return s.Rebuild(ctx)
	}
	if err := s.store.RecordReplicationID(ctx, false); err != nil {
		return err
	}
	lost, err := s.republishStale(ctx, p)
	if err != nil {
		return err
	}
	listed, err := s.listPods(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list pods: %w", err)
	}
	now := s.clock.Now()
	inDriver := map[string]bool{}
	byScope := map[string][]warmpool.Pod{}
	for _, p := range listed {
		inDriver[p.ID] = true
		byScope[p.ScopeID] = append(byScope[p.ScopeID], p)
	}
	published := map[string]bool{}
	err = s.forScopes(ctx, p, func(scope string) error {
		published[scope] = true
		rec, snap, err := s.pool(ctx, scope)
		if err != nil {
			return err
		}
		known := map[string]bool{}
		for _, p := range snap.Pods {
			known[p.Pod.ID] = true
		}
		var maxFence int64
		for _, p := range byScope[scope] {
			maxFence = max(maxFence, p.Fence)
			if known[p.ID] || inFlight(snap, p.Fence, now) {
				continue
			}
			s.orphan(ctx, rec, p, now, lost[scope])
		}
		if maxFence > 0 {
			if err := s.store.FenceRaise(ctx, scope, maxFence); err != nil {
				return err
			}
		}
		for _, p := range snap.Pods {
			if !inDriver[p.Pod.ID] && now.Sub(p.RegisteredAt) >= s.cfg.GhostGrace {
				s.bury(ctx, scope, p.Pod, "gone from the driver", "purged_ghost")
			}
		}
		return nil
	})
	if rerr := s.repair(ctx, p); rerr != nil {
		err = errors.Join(err, rerr)
	}
	// A scope published while the keyspace was being rebuilt gets its epoch now.
	if _, berr := s.store.Bootstrap(ctx, strconv.FormatInt(now.UnixNano(), 36)); berr != nil {
		err = errors.Join(err, berr)
	}
	// Pods of scopes that no longer exist anywhere are deleted.
	for scope, pods := range byScope {
		if published[scope] {
			continue
		}
		for _, p := range pods {
			if now.Sub(time.UnixMilli(p.CreatedAt)) >= s.cfg.OrphanGrace {
				s.deleteOrphan(ctx, p, "its scope has no config")
			}
		}
	}
	return err
}

// Repair drops every scope's expired leases, room entries, claims and waiters, and
// recomputes its slot counts from the sessions and claims (scope_repair.lua). The
// recount reads every session, so it runs on the first and then every RepairEvery-th
// call.
func (s *Sweeper) Repair(ctx context.Context) error { return s.repair(ctx, nil) }

func (s *Sweeper) repair(ctx context.Context, p *pacer) error {
	recount := (s.reconciles.Add(1)-1)%uint64(s.cfg.RepairEvery) == 0
	now := s.clock.Now()
	return s.forScopes(ctx, p, func(scope string) error {
		rep, err := s.store.ScopeRepair(ctx, scope, now, now.Add(noteTTL), recount)
		if err != nil {
			return err
		}
		if rep.Any() {
			s.log.InfoContext(ctx, "reconcile repaired derived state", "scope", scope, "slot_counts", rep.SlotCounts,
				"sessions_dropped", rep.Sessions, "claims_dropped", rep.Claims, "waiters_expired", rep.Waiters, "deploys_expired", rep.Deploys)
			s.fixed(ctx, "repaired")
		}
		return nil
	})
}

// inFlight reports whether a deploy lease with this fence is live: its pod is about
// to be registered by its leader. A lease past its deadline is dead (the register
// script refuses it), even before a repair removes it.
func inFlight(snap lua.Snapshot, fence int64, now time.Time) bool {
	for d, deadline := range snap.Deploys {
		if strings.TrimSuffix(d, "w") == strconv.FormatInt(fence, 10) && deadline.After(now) {
			return true
		}
	}
	return false
}

// orphan adopts or deletes a pod the driver has and Redis does not know. Such a pod had
// no session through warmpool (Redis binds sessions only to pods it knows, and forgets
// a pod's sessions with it), unless its scope's keys were lost (lost): then it may
// serve sessions Redis no longer has, and takes no new one until they have expired.
func (s *Sweeper) orphan(ctx context.Context, rec lua.ScopeRecord, p warmpool.Pod, now time.Time, lost bool) {
	switch {
	case p.Dead != "":
		s.deleteOrphan(ctx, p, "dead: "+p.Dead)
	case rec.Deleted:
		s.deleteOrphan(ctx, p, "its scope is deleted")
	case !p.Ready:
		if now.Sub(time.UnixMilli(p.CreatedAt)) >= s.cfg.OrphanGrace {
			s.deleteOrphan(ctx, p, "never became ready")
		}
	case p.DeployVer != rec.DeployVer:
		s.deleteOrphan(ctx, p, "old deploy_ver "+p.DeployVer)
	case p.SSEURL == "":
		s.deleteOrphan(ctx, p, "no SSE address to adopt it with")
	default:
		st, err := s.store.PodAdopt(ctx, p, now, lost)
		switch {
		case err != nil:
			s.log.WarnContext(ctx, "reconcile: adopt failed", "pod", p.ID, "err", err)
		case st == lua.AdoptFull:
			s.deleteOrphan(ctx, p, "no room under max_pods")
		case st == lua.AdoptGone:
			// Purged lately by a job that deletes it (or failed to): it stays gone.
			s.deleteOrphan(ctx, p, "purged")
		case st == lua.AdoptAdopted:
			s.log.InfoContext(ctx, "reconcile adopted a pod", "scope", p.ScopeID, "pod", p.ID)
			s.fixed(ctx, "adopted")
			s.sessions.Wake(ctx, p.ScopeID)
		}
	}
}

func (s *Sweeper) deleteOrphan(ctx context.Context, p warmpool.Pod, reason string) {
	if err := s.driver.Delete(ctx, p); err != nil {
		s.log.WarnContext(ctx, "reconcile: orphan not deleted", "pod", p.ID, "err", err)
		return
	}
	s.log.InfoContext(ctx, "reconcile deleted an orphan pod", "scope", p.ScopeID, "pod", p.ID, "reason", reason)
	s.fixed(ctx, "deleted_orphan")
}

// republishStale makes Redis serve the latest stored config of every scope: a stored
// scope that Redis does not have, or has at an older version, is published again. A
// config PUT whose publish failed (answered STORE_UNAVAILABLE after it was stored) is
// served from the next reconcile on, not only after a manual sync. It returns the
// scopes Redis did not have: all of a scope's keys share one slot, so a scope whose
// config is missing lost its sessions too (a Cluster node restarted empty).
func (s *Sweeper) republishStale(ctx context.Context, p *pacer) (lost map[string]bool, err error) {
	all, err := s.configs.List(ctx)
	if err != nil {
		return nil, err
	}
	lost = map[string]bool{}
	for _, c := range all {
		if err := p.step(ctx); err != nil {
			return nil, err
		}
		rec, err := s.store.Scope(ctx, c.ScopeID)
		switch {
		case warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound:
			lost[c.ScopeID] = true
		case err != nil:
			return nil, err
		case rec.Version >= c.Version:
			continue
		}
		if err := s.publish(ctx, c); err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "reconcile published a scope's stored config", "scope", c.ScopeID, "version", c.Version)
		s.fixed(ctx, "republished")
	}
	return lost, s.deleteStale(ctx, p, all)
}

// deleteStale deletes in Redis the scopes that the config store has deleted and Redis
// still serves (a delete that was stored and then failed to reach Redis). stored is
// the store's list of live scopes; a scope Redis has that the store never had is left
// alone.
func (s *Sweeper) deleteStale(ctx context.Context, p *pacer, stored []warmpool.StoredConfig) error {
	live := map[string]bool{}
	for _, c := range stored {
		live[c.ScopeID] = true
	}
	ids, err := s.store.ScopeIDs(ctx)
	if err != nil {
		return err
	}
	sort.Strings(ids)
	for _, id := range ids {
		if live[id] {
			continue
		}
		if err := p.step(ctx); err != nil {
			return err
		}
		version, ok, err := scopes.DeletedLive(ctx, s.configs, s.store, id)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if _, err := s.pools.DeleteScope(ctx, id, version, false); warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			continue // a Put made it live again meanwhile
		} else if err != nil {
			return err
		}
		s.log.InfoContext(ctx, "reconcile deleted a scope the config store has deleted", "scope", id, "version", version)
		s.fixed(ctx, "deleted_scope")
	}
	return nil
}

// publish publishes a stored config; a conflict (another replica published this
// version with other content) is counted like the config service counts it.
func (s *Sweeper) publish(ctx context.Context, c warmpool.StoredConfig) error {
	err := s.store.ScopePublish(ctx, lua.ScopeRecord{ScopeID: c.ScopeID, Config: c.Config, Version: c.Version, DeployVer: c.DeployVer})
	if errors.Is(err, lua.ErrPublishConflict) {
		s.cfg.Observe("config_publish", "conflict")
	}
	return err
}

// Rebuild restores a Redis that lost its data (or was never written) from the ground
// truth: every scope is published from the config store, every ready pod of a current
// version is adopted from the driver (the rest is left to reconcile), with every slot
// taken until session_ttl_s has passed (the sessions it served were lost with Redis's
// data, and may still run: the pod is not given new ones on top). After a failover
// the keyspace is not empty but may lack acknowledged writes: a pod Redis still knows
// keeps its sessions, and its free slots are held the same way. Fencing counters
// are raised past the pods' numbers, and only then is the epoch written, so no request
// is admitted on a half-built pool. Derived state is recomputed, never merged.
func (s *Sweeper) Rebuild(ctx context.Context) error {
	all, err := s.configs.List(ctx)
	if err != nil {
		return err
	}
	current := map[string]string{}
	for _, c := range all {
		if err := s.publish(ctx, c); err != nil {
			return err
		}
		current[c.ScopeID] = c.DeployVer
	}
	listed, err := s.listPods(ctx)
	if err != nil {
		return fmt.Errorf("rebuild: list pods: %w", err)
	}
	now := s.clock.Now()
	adopted := 0
	fences := map[string]int64{}
	for _, p := range listed {
		ver, ok := current[p.ScopeID]
		if !ok {
			continue
		}
		fences[p.ScopeID] = max(fences[p.ScopeID], p.Fence)
		if !p.Ready || p.Dead != "" || p.DeployVer != ver || p.SSEURL == "" {
			continue
		}
		// Redis lost the pod's sessions with it: they may still be running.
		st, err := s.store.PodAdopt(ctx, p, now, true)
		if err != nil {
			return err
		}
		if st == lua.AdoptAdopted {
			adopted++
		}
	}
	for scope, f := range fences {
		if err := s.store.FenceRaise(ctx, scope, f); err != nil {
			return err
		}
	}
	// The pool is built on this server's history from now on; recorded before the
	// epoch, so that no check between the two takes the rebuilt pool for a failover.
	if err := s.store.RecordReplicationID(ctx, true); err != nil {
		return err
	}
	if _, err := s.store.Bootstrap(ctx, strconv.FormatInt(now.UnixNano(), 36)); err != nil {
		return err
	}
	s.log.WarnContext(ctx, "keyspace rebuilt from the config store and the driver", "scopes", len(all), "pods_adopted", adopted)
	s.fixed(ctx, "rebuilt")
	return nil
}

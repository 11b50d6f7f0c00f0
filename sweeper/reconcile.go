package sweeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

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

// Reconcile makes Redis agree with the config store and the driver, the ground truths
// for configs and pods: a Redis that lost its data is rebuilt; a scope whose stored
// config is newer than the published one (or missing) is published again, and a
// served scope the global index lacks is indexed again; labelled pods Redis does not
// know are adopted (ready, of the current version, within max_pods) or deleted; pods
// Redis knows but the driver lacks are purged; expired leases, room entries, claims
// and waiters go; and every derived count is recomputed from the sessions and claims. It runs flat out; the job paces it.
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
	v, err := s.listView(ctx, s.listPods)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	visited := map[string]bool{}
	err = s.forScopes(ctx, p, func(scope string) error {
		visited[scope] = true
		return s.reconcileScope(ctx, v, scope, true, lost[scope])
	})
	if rerr := s.repair(ctx, p); rerr != nil {
		err = errors.Join(err, rerr)
	}
	// A scope published while the keyspace was being rebuilt gets its epoch now.
	if _, berr := s.store.Bootstrap(ctx, strconv.FormatInt(s.clock.Now().UnixNano(), 36)); berr != nil {
		err = errors.Join(err, berr)
	}
	// The pods of scopes the index does not name: whether their scope has a config
	// is for its config hash to say, not the index.
	for _, scope := range v.scopes() {
		if visited[scope] {
			continue
		}
		if serr := p.step(ctx); serr != nil {
			return errors.Join(err, serr)
		}
		if verr := s.reconcileScope(ctx, v, scope, false, lost[scope]); verr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", scope, verr))
		}
	}
	return err
}

// reconcileScope makes a scope's pool agree with the driver's pods of it in v (listed
// again first when v is too old to adopt from): a pod Redis does not know is adopted
// or deleted (judgeOrphan), a pod Redis has that the list lacks is purged past
// GhostGrace. A scope with no config in Redis (the stored ones were published again
// first) has its pods deleted past OrphanGrace, and leaves the index; a served scope
// the index lacks (a lost write) goes back in. indexed: the scope was found in the
// index.
func (s *Sweeper) reconcileScope(ctx context.Context, v *podView, scope string, indexed, lost bool) error {
	if err := s.freshen(ctx, v); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	pods := v.byScope[scope]
	rec, snap, err := s.pool(ctx, scope)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return s.noConfig(ctx, scope, indexed, pods, v.at)
	}
	if err != nil {
		return err
	}
	if !indexed {
		if err := s.index(ctx, scope); err != nil {
			return err
		}
	}
	var maxFence int64
	for _, p := range pods {
		maxFence = max(maxFence, p.Fence)
		s.judgeOrphan(ctx, rec, snap, p, v.at, lost)
	}
	if maxFence > 0 {
		if err := s.store.FenceRaise(ctx, scope, maxFence); err != nil {
			return err
		}
	}
	for _, p := range snap.Pods {
		if !v.listed[p.Pod.ID] && v.at.Sub(p.RegisteredAt) >= s.cfg.GhostGrace {
			s.bury(ctx, scope, p.Pod, "gone from the driver", "purged_ghost")
		}
	}
	return nil
}

// noConfig handles a scope whose config hash has no config (never published, lost
// with its node and in no config store, or deleted and forgotten): its pods are
// deleted past OrphanGrace, and an index entry of it (a publish that failed after
// its index write) goes.
func (s *Sweeper) noConfig(ctx context.Context, scope string, indexed bool, pods []warmpool.Pod, now time.Time) error {
	for _, p := range pods {
		if now.Sub(time.UnixMilli(p.CreatedAt)) >= s.cfg.OrphanGrace {
			s.deleteOrphan(ctx, p, "its scope has no config")
		}
	}
	if !indexed {
		return nil
	}
	out, err := s.store.ScopeUnindex(ctx, scope)
	if out {
		s.log.InfoContext(ctx, "reconcile took a scope without config out of the index", "scope", scope)
		s.fixed(ctx, "unindexed_scope")
	}
	return err
}

// index puts a scope Redis serves back into the global index, which lost it (its
// publish's index write failed, or its node restarted empty).
func (s *Sweeper) index(ctx context.Context, scope string) error {
	added, err := s.store.ScopeIndex(ctx, scope)
	if added {
		s.log.InfoContext(ctx, "a served scope was missing from the index: indexed again", "scope", scope, "job", jobName(ctx))
		s.fixed(ctx, "indexed_scope")
	}
	return err
}

// IndexJob builds every scope's indexes once, for a keyspace an older release wrote
// (redisstore.Store.LayoutCurrent false): scope_repair.lua with its recount, which rebuilds
// them, over every scope, then the layout mark. The bootstrap runs it before the
// replica serves; it has no interval of its own.
func (s *Sweeper) IndexJob() Job {
	return Job{Name: "index", Run: func(ctx context.Context) error {
		now := s.clock.Now()
		if err := s.forScopes(ctx, nil, func(scope string) error {
			_, err := s.store.ScopeRepair(ctx, scope, now, now.Add(noteTTL), true)
			return err
		}); err != nil {
			return err
		}
		s.log.InfoContext(ctx, "every scope's indexes built: the keyspace has the layout of this release", "layout", redisstore.IndexLayout)
		return s.store.MarkLayout(ctx)
	}}
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
		if rep.Deploys > 0 {
			// The warm deploys of a lease that ran out (its replica died) no longer
			// count: refill now, as the due sweep does after its own repair, for the
			// scope may have nothing left due that would bring the sweep back.
			return s.fillScope(ctx, scope)
		}
		return nil
	})
}

// republishStale makes Redis serve the latest stored config of every scope: a stored
// scope that Redis does not have, or has at an older version, is published again; one
// it serves that the global index lacks is indexed again. A config PUT whose publish
// failed (answered STORE_UNAVAILABLE after it was stored) is served from the next
// reconcile on, not only after a manual sync. It returns the scopes Redis did not
// have: all of a scope's keys share one slot, so a scope whose config is missing lost
// its sessions too (a Cluster node restarted empty).
func (s *Sweeper) republishStale(ctx context.Context, p *pacer) (lost map[string]bool, err error) {
	all, err := s.configs.List(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := s.store.ScopeIDs(ctx)
	if err != nil {
		return nil, err
	}
	indexed := make(map[string]bool, len(ids))
	for _, id := range ids {
		indexed[id] = true
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
			if !indexed[c.ScopeID] {
				if err := s.index(ctx, c.ScopeID); err != nil {
					return nil, err
				}
			}
			if rec.Version == c.Version {
				// The watch's probe period of the scope, in case a change of the feed
				// was missed (no replica followed it then).
				s.watch.setPeriod(c.ScopeID, time.Duration(c.Config.Pool.ProbePeriodS)*time.Second)
			}
			continue
		}
		if err := s.scopes.Publish(ctx, c); err != nil {
			return nil, err
		}
		s.watch.setPeriod(c.ScopeID, time.Duration(c.Config.Pool.ProbePeriodS)*time.Second)
		s.log.InfoContext(ctx, "reconcile published a scope's stored config", "scope", c.ScopeID, "version", c.Version)
		s.fixed(ctx, "republished")
	}
	return lost, s.deleteStale(ctx, p, all, ids)
}

// deleteStale deletes in Redis the scopes that the config store has deleted and Redis
// still serves (a delete that was stored and then failed to reach Redis). stored is
// the store's list of live scopes, ids the global index; a scope Redis has that the
// store never had is left alone.
func (s *Sweeper) deleteStale(ctx context.Context, p *pacer, stored []warmpool.StoredConfig, ids []string) error {
	live := map[string]bool{}
	for _, c := range stored {
		live[c.ScopeID] = true
	}
	sort.Strings(ids)
	for _, id := range ids {
		if live[id] {
			continue
		}
		if err := p.step(ctx); err != nil {
			return err
		}
		version, _, done, err := s.scopes.FinishDelete(ctx, id, false)
		if err != nil {
			return err
		}
		if !done {
			continue
		}
		s.log.InfoContext(ctx, "reconcile deleted a scope the config store has deleted", "scope", id, "version", version)
		s.fixed(ctx, "deleted_scope")
	}
	return nil
}

// buryGhosts purges the pods Redis kept that the driver lists no more (past
// GhostGrace, as reconcile does), before the rebuild adopts any: after a failover the
// new primary may hold a pod whose purge was lost, and adopting the pod a lost grant
// deployed beside it would put the scope, and its tenant's quota, over what the driver
// runs. One snapshot per scope; a rebuild is rare.
func (s *Sweeper) buryGhosts(ctx context.Context, current map[string]string, listed []warmpool.Pod, now time.Time) error {
	have := make(map[string]bool, len(listed))
	for _, p := range listed {
		have[p.ID] = true
	}
	for scope := range current {
		snap, err := s.store.PoolSnapshot(ctx, scope)
		if err != nil {
			return err
		}
		for _, p := range snap.Pods {
			if have[p.Pod.ID] || now.Sub(p.RegisteredAt) < s.cfg.GhostGrace {
				continue
			}
			if err := s.store.GhostPurge(ctx, scope, p.Pod.ID); err != nil {
				return err
			}
			s.log.InfoContext(ctx, "rebuild purged a pod the driver lists no more", "scope", scope, "pod", p.Pod.ID)
			s.fixed(ctx, "purged_ghost")
		}
	}
	return nil
}

// Rebuild restores a Redis that lost its data (or was never written) from the ground
// truth: every scope is published from the config store, the pods Redis kept that the
// driver no longer has are purged (buryGhosts), every ready pod of a current
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
		if err := s.scopes.Publish(ctx, c); err != nil {
			return err
		}
		current[c.ScopeID] = c.DeployVer
	}
	listed, err := s.listPods(ctx)
	if err != nil {
		return fmt.Errorf("rebuild: list pods: %w", err)
	}
	now := s.clock.Now()
	if err := s.buryGhosts(ctx, current, listed, now); err != nil {
		return err
	}
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
		if st == redisstore.AdoptAdopted {
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

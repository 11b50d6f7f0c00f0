package sweeper

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Autoscale keeps warm idle pods of the current version in every scope (min_idle_pods,
// or under warm_policy "demand" the target of redisstore.Store.PoolTarget),
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

// Reclaim deletes idle pods of an old deploy_ver (but those a rollout's prewarm still
// serves; or retired: of the scope's deleted life, recycled, or past
// max_sessions_per_pod) and idle pods beyond max_pods at once, and idle pods idle for
// pod_ttl_s or longer beyond the newest min_idle_pods (or the demand policy's target);
// a deleted scope's idle pods all go, and its keys once none is left. A
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
	// go idle first (surplus_pods in lua/lib/surplus.lua, which keeps them from new
	// sessions).
	excess := len(snap.Pods) - rec.Config.Pool.MaxPods()
	var current []redisstore.PodState
	for _, p := range snap.Pods {
		old := p.Retired || p.Draining || p.Pod.DeployVer != rec.DeployVer
		if old {
			excess--
		}
		switch {
		case !p.Idle:
		case p.Retired:
			s.retire(ctx, scope, p, "retired: its last session ended under recycle delete or after max_sessions_per_pod, or it is of the scope's deleted life")
		case p.Draining:
			s.retire(ctx, scope, p, "drained: its agent reported that it drains")
		case snap.Prewarm.Serves(p.Pod.DeployVer, now):
			// a rollout's prewarm: the old version's idle pods take sessions until it ends
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
	// The newest idle pods are the ones kept warm: min_idle_pods, or the demand
	// policy's target.
	slices.Reverse(current)
	keep := rec.Config.Pool.MinIdlePods
	if rec.Config.Pool.WarmPolicy == warmpool.WarmDemand && len(current) > keep {
		t, err := s.store.PoolTarget(ctx, scope, now)
		if err != nil {
			return err
		}
		keep = t.Idle
	}
	ttl := time.Duration(rec.Config.Pool.PodTTLS) * time.Second
	for i, p := range current {
		if i >= keep && now.Sub(p.IdleSince) >= ttl {
			s.retire(ctx, scope, p, "idle past pod_ttl_s")
		}
	}
	return nil
}

// retire takes an idle pod out of the pool, if it is still idle since the same time,
// then deletes it.
func (s *Sweeper) retire(ctx context.Context, scope string, p redisstore.PodState, reason string) {
	since := p.IdleSince
	if _, err := s.store.PodPurge(ctx, scope, p.Pod.ID, reason, &since); err != nil {
		if !errors.Is(err, redisstore.ErrPodBusy) {
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

// fixed reports a repair made by the job running under ctx, and counts it in the full
// pass's fixes when ctx is the pass's.
func (s *Sweeper) fixed(ctx context.Context, fix string) {
	s.cfg.Observe("sweep", fix)
	s.cfg.OnFix(jobName(ctx), fix)
	if f, ok := ctx.Value(passFixesKey{}).(*passFixes); ok {
		f.mu.Lock()
		f.by[fix]++
		f.mu.Unlock()
	}
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

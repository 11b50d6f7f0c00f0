package rm

import (
	"context"
	"errors"
	"fmt"

	"github.com/warmpool/warmpool/redisstore"
)

// DeleteScope deletes a scope whose config store has it deleted at version (its latest
// version): from now on it takes no new session, hold or deploy on any replica, its
// deploys in flight are given up and its pods retired. Then Drain deletes its idle pods
// (every pod with force, their sessions and holds released). It returns how many pods
// the scope had. Errors: SCOPE_NOT_FOUND (not published, deleted already, or a newer
// version is published), STORE_UNAVAILABLE.
func (m *Manager) DeleteScope(ctx context.Context, scope string, version int64, force bool) (int, error) {
	pods, err := m.store.ScopeDelete(ctx, scope, version, m.clock.Now().Add(m.cfg.ClaimTTL))
	if err != nil {
		return 0, fmt.Errorf("delete scope %q: %w", scope, err)
	}
	m.log.InfoContext(ctx, "scope deleted", "scope", scope, "version", version, "pods", pods, "force", force)
	if _, err := m.Drain(ctx, scope, force); err != nil {
		return pods, fmt.Errorf("scope %q deleted, its pods not all deleted yet (the sweeper goes on): %w", scope, err)
	}
	return pods, nil
}

// Drain deletes the retired pods of a scope (those of a deleted scope, redisstore.PodState.
// Retired) that are idle, or with force all of them, releasing their sessions and
// holds: each is purged from the pool, then deleted through the driver. When the scope
// is deleted and nothing of it is left, its keys are forgotten (redisstore.Store.ScopeForget).
// It returns how many pods it deleted. A pod the driver fails to delete is left to
// reconcile (an orphan of a scope that is gone). Errors: STORE_UNAVAILABLE.
func (m *Manager) Drain(ctx context.Context, scope string, force bool) (int, error) {
	snap, err := m.store.PoolSnapshot(ctx, scope)
	if err != nil {
		return 0, err
	}
	deleted := 0
	var errs []error
	for _, p := range snap.Pods {
		if !p.Retired || (!p.Idle && !force) {
			continue
		}
		// Without force, only while it is still idle since then: a pod that just took
		// a hold (acquired before the delete) stays until the hold ends.
		reason, since := "its scope was deleted", &p.IdleSince
		if force {
			reason, since = "its scope was deleted (force)", nil
		}
		released, err := m.store.PodPurge(ctx, scope, p.Pod.ID, reason, since)
		if errors.Is(err, redisstore.ErrPodBusy) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.driver.Delete(ctx, p.Pod); err != nil {
			m.log.WarnContext(ctx, "delete of a retired pod failed; reconcile deletes the orphan", "scope", scope, "pod", p.Pod.ID, "err", err)
		}
		m.log.InfoContext(ctx, "retired pod deleted", "scope", scope, "pod", p.Pod.ID, "sessions_released", len(released))
		deleted++
	}
	if len(errs) > 0 {
		return deleted, errors.Join(errs...)
	}
	if _, err := m.store.ScopeForget(ctx, scope); err != nil {
		return deleted, err
	}
	return deleted, nil
}

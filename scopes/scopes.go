// Package scopes is the config service: it validates scope configs, stores every
// version in the config store, and publishes the latest one to Redis, where every
// replica routes with it at once.
package scopes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// syncLease bounds how long a crashed sync blocks the next one.
const syncLease = 30 * time.Second

// Published is what the config service needs of the Redis state store
// (redisstore.Store): publish a config, read what is published, and the sync's lease.
type Published interface {
	ScopePublish(ctx context.Context, rec redisstore.ScopeRecord) error
	Scope(ctx context.Context, scope string) (redisstore.ScopeRecord, error)
	Keys() redisstore.Keyspace
	Obtain(ctx context.Context, key string, ttl time.Duration) (*redisstore.Lock, error)
}

var _ Published = (*redisstore.Store)(nil)

// Service stores and publishes scope configs, and deletes scopes.
type Service struct {
	store   warmpool.ConfigStore
	redis   Published
	pods    Pods
	log     *slog.Logger
	observe func(event, outcome string)
	policy  warmpool.DeployPolicy
	dryRun  warmpool.DryRunner
}

// Pods is what the config service needs of the resource manager (rm.Manager) to delete
// a scope.
type Pods interface {
	// DeleteScope deletes a scope in Redis that the config store has deleted at
	// version, and its idle pods (every pod with force). It returns how many pods the
	// scope had. Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
	DeleteScope(ctx context.Context, scope string, version int64, force bool) (int, error)
}

// New returns a Service over the config store, Redis and the pods. observe, when set,
// is told of a publish refused because another replica published the same version
// with other content ("config_publish", "conflict").
func New(store warmpool.ConfigStore, redis Published, pods Pods, log *slog.Logger, observe func(event, outcome string)) *Service {
	return &Service{store: store, redis: redis, pods: pods, log: defaults.Logger(log).With("component", "scopes"), observe: defaults.Observer(observe)}
}

// WithPolicy holds every config put from now on to policy (nil: none), and asks dry
// (nil: none) whether its cluster would create the pod of a changed deploy spec.
func (s *Service) WithPolicy(policy warmpool.DeployPolicy, dry warmpool.DryRunner) *Service {
	s.policy, s.dryRun = policy, dry
	return s
}

// Put normalizes cfg (filling its defaults), holds it to the deploy policy (and, when
// its deploy spec changes, to the cluster's dry run), stores it as the scope's next
// version and publishes it. Errors: VALIDATION, STORE_UNAVAILABLE.
func (s *Service) Put(ctx context.Context, scope string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, error) {
	if _, err := s.admit(ctx, scope, &cfg, false); err != nil {
		return warmpool.StoredConfig{}, err
	}
	return s.put(ctx, scope, cfg)
}

// PutDryRun checks cfg as Put does, the cluster's dry run included, and answers the
// pod it would deploy without storing anything: the driver's, as a deploy creates it,
// when the driver dry-runs; else the policy's rendering. Errors: VALIDATION,
// STORE_UNAVAILABLE.
func (s *Service) PutDryRun(ctx context.Context, scope string, cfg warmpool.ScopeConfig) (any, error) {
	pod, err := s.admit(ctx, scope, &cfg, true)
	switch {
	case err != nil:
		return nil, err
	case pod != nil:
		return pod, nil
	case s.policy == nil:
		return nil, warmpool.Errorf(warmpool.CodeValidation, "dry_run: this server renders no pods (it has no deploy policy)")
	}
	return s.policy.Render(ctx, scope, cfg.Deploy)
}

// admit normalizes cfg and holds it to the policy; the cluster's dry run runs when
// always is set or the deploy spec differs from the scope's stored one, and its pod is
// answered (nil when none ran).
func (s *Service) admit(ctx context.Context, scope string, cfg *warmpool.ScopeConfig, always bool) (any, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return nil, err
	}
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	cfg.Tenant = cfg.TenantOf(scope)
	if s.policy != nil {
		if err := s.policy.Check(ctx, scope, cfg.Deploy); err != nil {
			return nil, err
		}
	}
	if s.dryRun == nil {
		return nil, nil
	}
	if !always {
		cur, err := s.store.Get(ctx, scope)
		switch {
		case err == nil && cur.DeployVer == cfg.Deploy.DeployVer():
			return nil, nil
		case err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound:
			return nil, err
		}
	}
	return s.dryRun.DryRun(ctx, scope, cfg.Deploy)
}

// put stores and publishes a normalized config of a valid scope id.
func (s *Service) put(ctx context.Context, scope string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, error) {
	stored, err := s.store.Put(ctx, scope, cfg)
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	if err := s.Publish(ctx, stored); err != nil {
		return warmpool.StoredConfig{}, fmt.Errorf("publish %q v%d (stored; a sync publishes it): %w", scope, stored.Version, err)
	}
	s.log.Info("scope config stored", "scope", scope, "version", stored.Version, "deploy_ver", stored.DeployVer)
	return stored, nil
}

// Get returns the latest stored config. Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (s *Service) Get(ctx context.Context, scope string) (warmpool.StoredConfig, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return warmpool.StoredConfig{}, err
	}
	c, err := s.store.Get(ctx, scope)
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	// A version stored before scopes named their tenant has the default one.
	c.Config.Tenant = c.Config.TenantOf(scope)
	return c, nil
}

// History returns one page of a scope's stored versions, newest first. Errors:
// VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (s *Service) History(ctx context.Context, scope string, q warmpool.HistoryQuery) (warmpool.HistoryPage, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return warmpool.HistoryPage{}, err
	}
	return s.store.History(ctx, scope, q)
}

// Delete deletes a scope: the config store keeps its history (a later Put starts at
// the next version), and from the answer on no replica routes to it, acquires or
// reports it. A retry of a delete that the config store took but Redis did not (it
// answered STORE_UNAVAILABLE) finishes it. Errors: VALIDATION, SCOPE_NOT_FOUND
// (unknown, or deleted already), STORE_UNAVAILABLE (stored as deleted; a retry or
// reconcile finishes the rest).
func (s *Service) Delete(ctx context.Context, scope string, force bool) (warmpool.ScopeDeleted, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return warmpool.ScopeDeleted{}, err
	}
	last, err := s.store.Delete(ctx, scope)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return s.finishDelete(ctx, scope, force, err)
	}
	if err != nil {
		return warmpool.ScopeDeleted{}, err
	}
	n, err := s.pods.DeleteScope(ctx, scope, last.Version, force)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		// Never published, or a newer version already is (a Put right after this
		// delete): Redis has nothing of this version to delete.
		s.log.Info("scope deleted in the config store; Redis had nothing of it to delete", "scope", scope, "version", last.Version, "err", err)
		return warmpool.ScopeDeleted{ScopeID: scope}, nil
	}
	if err != nil {
		return warmpool.ScopeDeleted{}, fmt.Errorf("delete %q v%d (stored as deleted; reconcile finishes it): %w", scope, last.Version, err)
	}
	s.log.Info("scope deleted", "scope", scope, "version", last.Version, "pods", n, "force", force)
	return warmpool.ScopeDeleted{ScopeID: scope, Pods: n}, nil
}

// finishDelete answers a delete of a scope the config store has no live version of
// (notFound): when Redis still serves the version the store deleted, it deletes it in
// Redis, as an earlier delete that failed after the store took it would have;
// otherwise the answer is notFound.
func (s *Service) finishDelete(ctx context.Context, scope string, force bool, notFound error) (warmpool.ScopeDeleted, error) {
	version, n, done, err := s.FinishDelete(ctx, scope, force)
	if err != nil {
		return warmpool.ScopeDeleted{}, fmt.Errorf("delete %q v%d (stored as deleted; reconcile finishes it): %w", scope, version, err)
	}
	if !done {
		return warmpool.ScopeDeleted{}, notFound
	}
	s.log.Info("scope deleted: a stored delete finished in Redis", "scope", scope, "version", version, "pods", n, "force", force)
	return warmpool.ScopeDeleted{ScopeID: scope, Pods: n}, nil
}

// FinishDelete deletes in Redis a scope that the config store has deleted and Redis
// still serves (a delete the store took and Redis did not), and its idle pods (every
// pod with force): what Delete, the config feed and the full pass each do when they
// find such a scope. It returns the version deleted, how many pods the scope had, and
// whether it deleted anything: not when Redis serves no such version (the scope is
// live in the store, never published, deleted in Redis already, or a Put made it live
// again meanwhile). Errors: STORE_UNAVAILABLE (then the version is the one it tried).
func (s *Service) FinishDelete(ctx context.Context, scope string, force bool) (version int64, pods int, done bool, err error) {
	version, ok, err := deletedLive(ctx, s.store, s.redis, scope)
	if err != nil || !ok {
		return version, 0, false, err
	}
	pods, err = s.pods.DeleteScope(ctx, scope, version, force)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return version, 0, false, nil
	}
	if err != nil {
		return version, 0, false, err
	}
	return version, pods, true, nil
}

// deletedLive reports whether Redis still serves a scope that the config store has
// deleted (a delete the store took and Redis did not), and the deleted version, the
// latest stored: the one to delete in Redis. Redis serves it at that version or an
// older one (a Put stored but never published before the delete). The latest version
// is read first, as a history page of one, then Get: a Put that makes the scope live
// again in between is found live, never taken for a deleted version and deleted in
// Redis while the store serves it; a Put after Get publishes a newer version, which
// the delete in Redis then leaves alone.
// A scope deleted in Redis already (its tombstone) is not served. Errors:
// STORE_UNAVAILABLE.
func deletedLive(ctx context.Context, store warmpool.ConfigStore, redis Published, scope string) (version int64, ok bool, err error) {
	hist, err := store.History(ctx, scope, warmpool.HistoryQuery{Limit: 1})
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound || (err == nil && len(hist.Versions) == 0) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if _, err := store.Get(ctx, scope); err == nil {
		return 0, false, nil
	} else if warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		return 0, false, err
	}
	version = hist.Versions[0].Version
	rec, err := redis.Scope(ctx, scope)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return version, rec.Version <= version, nil
}

// Publish publishes a stored config: the one way every caller (a Put, a sync, the
// config feed and the full pass of the sweepers) makes Redis serve one. A conflict (the version is published with other
// content: replicas on different config stores) is logged and counted, and returned.
func (s *Service) Publish(ctx context.Context, c warmpool.StoredConfig) error {
	err := s.redis.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: c.ScopeID, Config: c.Config, Version: c.Version, DeployVer: c.DeployVer, ChangedAt: c.UpdatedAt})
	if errors.Is(err, redisstore.ErrPublishConflict) {
		s.log.Error("config not published: another replica published this version with other content; do the replicas share one config store?",
			"scope", c.ScopeID, "version", c.Version, "deploy_ver", c.DeployVer, "err", err)
		s.observe("config_publish", "conflict")
	}
	return err
}

// Sync publishes every stored scope to Redis, one sync at a time across replicas: it
// runs under a lease lock kept alive while it works, and stops when the lock is lost.
// It returns how many scopes it published. Errors: CONFIG_SYNC_BUSY,
// STORE_UNAVAILABLE.
func (s *Service) Sync(ctx context.Context) (int, error) {
	lock, err := s.redis.Obtain(ctx, s.redis.Keys().Lock("config_sync"), syncLease)
	if errors.Is(err, warmpool.ErrNotObtained) {
		return 0, warmpool.Errorf(warmpool.CodeConfigSyncBusy, "a config sync is running").Retry(1)
	}
	if err != nil {
		return 0, err
	}
	locked, stop := lock.KeepAlive(ctx)
	n, err := s.publishAll(locked)
	if lerr := stop(); lerr != nil {
		return 0, fmt.Errorf("%w: %w", warmpool.Errorf(warmpool.CodeStoreUnavailable, "config sync stopped: its lock was lost").Retry(1), lerr)
	}
	release, cancel := redisstore.CleanupContext(ctx)
	defer cancel()
	if rerr := lock.Release(release); rerr != nil {
		s.log.Warn("sync lock not released; it expires by itself", "err", rerr)
	}
	if err != nil {
		return 0, err
	}
	s.log.Info("config synced", "scopes", n)
	return n, nil
}

// publishAll publishes every stored scope and returns how many.
func (s *Service) publishAll(ctx context.Context) (int, error) {
	all, err := s.store.List(ctx)
	if err != nil {
		return 0, err
	}
	for _, c := range all {
		if err := s.Publish(ctx, c); err != nil {
			return 0, fmt.Errorf("sync %q: %w", c.ScopeID, err)
		}
	}
	return len(all), nil
}

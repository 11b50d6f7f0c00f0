package sweeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// feedRetry is the wait before the namespaces are read (or the tenants published)
// again at the start, when the config store did not answer.
const feedRetry = time.Second

// Follow runs beside the jobs on every replica until ctx ends, and then returns
// ctx.Err(). Every Interval it writes again the due-index entries whose write failed
// on this replica (retryDueIndex). At the start it names every stored scope's
// namespace to a driver that lists only the namespaces it knows of
// (warmpool.NamespaceWatcher), once. Then it follows the config store's change feed
// (warmpool.ConfigFeed; a store without one is left to the full pass): each scope
// written, by any replica, is checked against Redis at once, so that a config stored
// and not published (the writer's publish failed) is published, a scope deleted in the
// store and still live in Redis is deleted, and the replica's probe period and
// namespace of the scope follow the change. The full pass does the same over every
// scope as an audit: what it fixes after the feed ran is counted (Config.OnFix) and
// should be nothing. With Config.Tenants, each tenant written is published too, and
// every tenant with quotas once at the start, beside the feed: each publish reads the
// store when it runs, one at a time (tenants.Service.Changed), so the last one
// publishes what the store holds.
func (s *Sweeper) Follow(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.retryDueIndex(ctx) })
	if _, ok := s.driver.(warmpool.NamespaceWatcher); ok {
		wg.Go(func() { s.nameNamespaces(ctx) })
	}
	if s.cfg.Tenants != nil {
		wg.Go(func() { s.publishTenants(ctx) })
	}
	defer wg.Wait()
	feed, ok := s.configs.(warmpool.ConfigFeed)
	if !ok {
		<-ctx.Done()
		return ctx.Err()
	}
	return feed.Follow(ctx, s.configChanged)
}

// nameNamespaces names every stored scope's namespace to the driver, trying again
// every feedRetry until the store answers or ctx ends.
func (s *Sweeper) nameNamespaces(ctx context.Context) {
	for {
		all, err := s.configs.List(ctx)
		if err == nil {
			err = s.watchNamespaces(ctx, all)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.WarnContext(ctx, "namespaces not named to the driver; trying again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedRetry):
		}
	}
}

// publishTenants publishes every tenant's quotas, trying again every feedRetry until
// the stores answer or ctx ends.
func (s *Sweeper) publishTenants(ctx context.Context) {
	for {
		n, err := s.cfg.Tenants.PublishAll(ctx)
		if err == nil {
			s.log.InfoContext(ctx, "tenants' quotas published", "tenants", n)
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.WarnContext(ctx, "tenants' quotas not published; trying again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedRetry):
		}
	}
}

// configChanged applies changes of the config store's feed. A change it could not
// apply makes it fail, and the feed delivers the batch again.
func (s *Sweeper) configChanged(ctx context.Context, changes []warmpool.ConfigChange) error {
	var errs []error
	for _, c := range changes {
		if c.TenantID != "" {
			if err := s.tenantChanged(ctx, c); err != nil {
				errs = append(errs, fmt.Errorf("tenant %s v%d: %w", c.TenantID, c.Version, err))
			}
			continue
		}
		if err := s.applyChange(ctx, c); err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
			errs = append(errs, fmt.Errorf("%s v%d: %w", c.ScopeID, c.Version, err))
			continue
		}
		s.cfg.Observe("config_feed", "checked")
	}
	if err := errors.Join(errs...); err != nil {
		s.log.WarnContext(ctx, "config feed: changes not applied; they come again", "err", err)
		return err
	}
	return nil
}

// tenantChanged publishes a tenant's change, when the replica has tenants.
func (s *Sweeper) tenantChanged(ctx context.Context, c warmpool.ConfigChange) error {
	if s.cfg.Tenants == nil {
		return nil
	}
	if err := s.cfg.Tenants.Changed(ctx, c.TenantID); err != nil {
		return err
	}
	s.cfg.Observe("config_feed", "tenant")
	return nil
}

// applyChange makes Redis serve what the store has after c, as the full pass's
// republishStale and deleteStale do for one scope, and keeps the replica's facts of
// the scope (its probe period, its namespace) current.
func (s *Sweeper) applyChange(ctx context.Context, c warmpool.ConfigChange) error {
	if c.Deleted {
		s.watch.forgetPeriod(c.ScopeID)
		version, _, done, err := s.scopes.FinishDelete(ctx, c.ScopeID, false)
		if err != nil || !done {
			return err
		}
		s.log.InfoContext(ctx, "config feed deleted a scope the config store has deleted", "scope", c.ScopeID, "version", version)
		s.cfg.Observe("config_feed", "deleted_scope")
		return nil
	}
	rec, err := s.store.Scope(ctx, c.ScopeID)
	switch {
	case err == nil && rec.Version >= c.Version:
		// Published: by the writer, whose index write may have failed after.
		if err := s.indexServed(ctx, c.ScopeID); err != nil {
			return err
		}
		return s.scopeSeen(ctx, c.ScopeID, rec.Config)
	case err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound:
		return err
	}
	// Redis has an older version, or none (a new scope, or deleted there): the writer
	// has not published yet, or failed to.
	stored, err := s.configs.Get(ctx, c.ScopeID)
	if err != nil {
		return err // SCOPE_NOT_FOUND: deleted since; its change follows
	}
	if stored.Version > rec.Version {
		if err := s.scopes.Publish(ctx, stored); err != nil {
			return err
		}
		s.log.InfoContext(ctx, "config feed published a scope's stored config", "scope", stored.ScopeID, "version", stored.Version)
		s.cfg.Observe("config_feed", "published")
	}
	return s.scopeSeen(ctx, stored.ScopeID, stored.Config)
}

// indexServed puts a scope Redis serves into the global index, which should have it
// already: one it lacked is counted (config_feed, indexed_scope).
func (s *Sweeper) indexServed(ctx context.Context, scope string) error {
	added, err := s.store.ScopeIndex(ctx, scope)
	if added {
		s.log.InfoContext(ctx, "config feed indexed a served scope the index lacked", "scope", scope)
		s.cfg.Observe("config_feed", "indexed_scope")
	}
	return err
}

// scopeSeen takes a scope's config as Redis serves it: its probe period for the
// watch, its namespace for a driver that lists only the namespaces it knows of.
func (s *Sweeper) scopeSeen(ctx context.Context, scope string, cfg warmpool.ScopeConfig) error {
	s.watch.setPeriod(scope, time.Duration(cfg.Pool.ProbePeriodS)*time.Second)
	if w, ok := s.driver.(warmpool.NamespaceWatcher); ok {
		return w.WatchNamespace(ctx, cfg.Deploy.Namespace)
	}
	return nil
}

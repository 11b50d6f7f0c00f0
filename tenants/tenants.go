// Package tenants is the tenant service (SPEC §12.1): it stores tenants' quotas in the
// config store, every version, publishes them to where they are enforced
// (warmpool.TenantQuotas) and answers what a tenant uses and its weighted share.
package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
)

// Service stores and publishes tenants' quotas.
type Service struct {
	store  warmpool.TenantStore
	quotas warmpool.TenantQuotas
	log    *slog.Logger

	// turn serializes this replica's reads-then-publishes (see Changed).
	turn sync.Mutex
	// mu guards weights, the weight of each tenant with quotas, and limits, its
	// limits, as this replica last read them; and ended, the tenants whose quotas went
	// since, until a balance pass ends their scopes' governance.
	mu      sync.Mutex
	weights map[string]int64
	limits  map[string]warmpool.TenantLimits
	ended   map[string]bool
}

// New returns a Service over the config store and where quotas are enforced.
func New(store warmpool.TenantStore, quotas warmpool.TenantQuotas, log *slog.Logger) *Service {
	return &Service{store: store, quotas: quotas, log: defaults.Logger(log).With("component", "tenants"), weights: map[string]int64{},
		limits: map[string]warmpool.TenantLimits{}, ended: map[string]bool{}}
}

// Put checks cfg, stores it as the tenant's next version and publishes it. Errors:
// VALIDATION, STORE_UNAVAILABLE (the config stored or not: the config feed of every
// replica publishes what was stored).
func (s *Service) Put(ctx context.Context, tenant string, cfg warmpool.TenantConfig) (warmpool.StoredTenant, error) {
	if err := warmpool.CheckTenantID(tenant); err != nil {
		return warmpool.StoredTenant{}, err
	}
	if err := cfg.Validate(); err != nil {
		return warmpool.StoredTenant{}, err
	}
	stored, err := s.store.PutTenant(ctx, tenant, cfg)
	if err != nil {
		return warmpool.StoredTenant{}, err
	}
	if err := s.Changed(ctx, tenant); err != nil {
		return warmpool.StoredTenant{}, fmt.Errorf("publish tenant %q v%d (stored; the config feed publishes it): %w", tenant, stored.Version, err)
	}
	s.log.Info("tenant quotas stored", "tenant", tenant, "version", stored.Version)
	return stored, nil
}

// Delete removes the tenant's quotas (a new version, deleted); its scopes keep their
// tenant, which has no limit from then on. Errors: VALIDATION, TENANT_NOT_FOUND (it
// has no quotas), STORE_UNAVAILABLE.
func (s *Service) Delete(ctx context.Context, tenant string) (warmpool.TenantDeleted, error) {
	if err := warmpool.CheckTenantID(tenant); err != nil {
		return warmpool.TenantDeleted{}, err
	}
	version, err := s.store.DeleteTenant(ctx, tenant)
	if errors.Is(err, warmpool.ErrNoTenantConfig) {
		return warmpool.TenantDeleted{}, warmpool.Errorf(warmpool.CodeTenantNotFound, "tenant %q has no quotas to delete", tenant)
	}
	if err != nil {
		return warmpool.TenantDeleted{}, err
	}
	if err := s.Changed(ctx, tenant); err != nil {
		return warmpool.TenantDeleted{}, fmt.Errorf("forget tenant %q v%d (stored as deleted; the config feed forgets it): %w", tenant, version, err)
	}
	s.log.Info("tenant quotas deleted", "tenant", tenant, "version", version)
	return warmpool.TenantDeleted{TenantID: tenant, Version: version}, nil
}

// Get answers the tenant: its quotas, or none (a tenant that scopes name but that has
// no quotas has no limit), its use and share. Errors: VALIDATION, TENANT_NOT_FOUND (no
// quotas, and no scope names it), STORE_UNAVAILABLE.
func (s *Service) Get(ctx context.Context, tenant string) (warmpool.TenantView, error) {
	if err := warmpool.CheckTenantID(tenant); err != nil {
		return warmpool.TenantView{}, err
	}
	stored, err := s.store.GetTenant(ctx, tenant)
	none := errors.Is(err, warmpool.ErrNoTenantConfig)
	switch {
	case none:
		stored = warmpool.StoredTenant{TenantID: tenant, Config: warmpool.TenantConfig{Weight: warmpool.DefaultTenantWeight}}
	case err != nil:
		return warmpool.TenantView{}, err
	}
	t, scopes, err := s.answer(ctx, stored)
	if err != nil {
		return warmpool.TenantView{}, err
	}
	if none && scopes == 0 {
		return warmpool.TenantView{}, warmpool.Errorf(warmpool.CodeTenantNotFound, "tenant %q has no quotas and no scope names it", tenant)
	}
	return t, nil
}

// List answers a page of the tenants with quotas, in the order of their ids, after
// the id after, and the cursor of the next page ("" on the last). Errors:
// STORE_UNAVAILABLE.
func (s *Service) List(ctx context.Context, after string, limit int) ([]warmpool.TenantView, string, error) {
	page, err := s.store.ListTenants(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(page) > limit {
		page, next = page[:limit], page[limit-1].TenantID
	}
	out := make([]warmpool.TenantView, 0, len(page))
	for _, st := range page {
		t, _, err := s.answer(ctx, st)
		if err != nil {
			return nil, "", err
		}
		out = append(out, t)
	}
	return out, next, nil
}

// answer adds the tenant's use and share to its stored quotas, and says how many
// published scopes name it.
func (s *Service) answer(ctx context.Context, st warmpool.StoredTenant) (warmpool.TenantView, int64, error) {
	t := warmpool.TenantView{TenantID: st.TenantID, Version: st.Version, Config: st.Config, Share: s.share(st.TenantID, st.Config.Weight)}
	if st.Version != 0 {
		t.UpdatedAt = &st.UpdatedAt
	}
	u, err := s.quotas.TenantUse(ctx, st.TenantID)
	if err != nil {
		return warmpool.TenantView{}, 0, err
	}
	t.Use = u.View()
	return t, u.Scopes, nil
}

// share is the tenant's weight over the sum of the weights of every tenant with
// quotas this replica knows of, the tenant's own counted once whether it has quotas
// or not, to four decimals.
func (s *Service) share(tenant string, weight int64) float64 {
	s.mu.Lock()
	sum := weight
	for id, w := range s.weights {
		if id != tenant {
			sum += w
		}
	}
	s.mu.Unlock()
	return math.Round(float64(weight)/float64(sum)*1e4) / 1e4
}

// Changed publishes what the config store holds now for the tenant: its limits, or,
// when it has no quotas, that it has none (ForgetTenant). It is the config feed's step
// for a tenant's change on every replica, and the writer's after a write. This
// replica's calls take turns, each reading the store after the one before published:
// the last publish of a replica is of what the store held after the last change it
// was told of. Errors: STORE_UNAVAILABLE.
func (s *Service) Changed(ctx context.Context, tenant string) error {
	s.turn.Lock()
	defer s.turn.Unlock()
	stored, err := s.store.GetTenant(ctx, tenant)
	l := warmpool.Unlimited()
	switch {
	case errors.Is(err, warmpool.ErrNoTenantConfig):
		s.note(tenant, 0, l)
		err = s.quotas.ForgetTenant(ctx, tenant)
	case err != nil:
		return err
	default:
		l = stored.Config.Limits()
		s.note(tenant, stored.Config.Weight, l)
		err = s.quotas.PublishTenant(ctx, tenant, l)
	}
	if err != nil {
		return err
	}
	// The scopes follow at once; a failure here is the periodic pass's to mend.
	if berr := s.quotas.BalanceTenant(ctx, tenant, l); berr != nil {
		s.log.WarnContext(ctx, "tenant's scopes not balanced; the next pass does it", "tenant", tenant, "err", berr)
	}
	return nil
}

// note keeps the tenant's weight and limits (weight 0: it has no quotas).
func (s *Service) note(tenant string, w int64, l warmpool.TenantLimits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w == 0 {
		if _, had := s.limits[tenant]; had {
			s.ended[tenant] = true
		}
		delete(s.weights, tenant)
		delete(s.limits, tenant)
		return
	}
	delete(s.ended, tenant)
	s.weights[tenant] = w
	s.limits[tenant] = l
}

// Balance runs a balance pass (TenantQuotas.BalanceTenant) of every tenant with
// quotas this replica knows of, and of each whose quotas went since its last pass,
// then the total cap's passes (TenantQuotas.BalanceGranted): the sweeper's tenants
// job, every tick. Errors: STORE_UNAVAILABLE.
func (s *Service) Balance(ctx context.Context) error {
	s.mu.Lock()
	todo := make(map[string]warmpool.TenantLimits, len(s.limits)+len(s.ended))
	for id, l := range s.limits {
		todo[id] = l
	}
	for id := range s.ended {
		todo[id] = warmpool.Unlimited()
	}
	s.mu.Unlock()
	var errs []error
	for id, l := range todo {
		err := s.quotas.BalanceTenant(ctx, id, l)
		if err == nil && l == warmpool.Unlimited() {
			s.mu.Lock()
			delete(s.ended, id)
			s.mu.Unlock()
		}
		errs = append(errs, err)
	}
	errs = append(errs, s.quotas.BalanceGranted(ctx, todo))
	return errors.Join(errs...)
}

// listPage is how many tenants PublishAll reads at once.
const listPage = 500

// PublishAll publishes every tenant with quotas, as Changed does each, and returns
// how many: what a replica does when it starts following the config feed. Errors:
// STORE_UNAVAILABLE.
func (s *Service) PublishAll(ctx context.Context) (int, error) {
	n, after := 0, ""
	for {
		page, err := s.store.ListTenants(ctx, after, listPage)
		if err != nil {
			return n, err
		}
		for _, t := range page {
			if err := s.Changed(ctx, t.TenantID); err != nil {
				return n, fmt.Errorf("publish tenant %q: %w", t.TenantID, err)
			}
			n++
		}
		if len(page) < listPage {
			return n, nil
		}
		after = page[len(page)-1].TenantID
	}
}

// Usages reads the use of every tenant with quotas this replica knows of, by id: the
// tenant gauges, bounded by the tenant count. Errors: STORE_UNAVAILABLE.
func (s *Service) Usages(ctx context.Context) ([]warmpool.TenantUsage, error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.weights))
	for id := range s.weights {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	slices.SortFunc(ids, cmp.Compare)
	out := make([]warmpool.TenantUsage, 0, len(ids))
	for _, id := range ids {
		u, err := s.quotas.TenantUse(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, warmpool.TenantUsage{TenantID: id, Use: u})
	}
	return out, nil
}

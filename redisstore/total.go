package redisstore

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// The cap over every pod of the deployment (--max-pods-total, SPEC §12.1) is one more
// escrow above the tenants' (total_grant.lua, on the total's own slot): a grant of
// pods comes from the tenant's escrow, then from the total's, and only then raises the
// scope's allowance; what a scope gives back goes to both. While the cap is set every
// scope is governed in pods, whether its tenant has quotas or not, so that no deploy
// starts outside the escrow. While the cap binds the total's escrow grants in weighted
// max-min order between the tenants that are refused (total_grant.lua).

// MaxPodsTotal sets the cap this replica enforces (n <= 0: none). Every replica of a
// deployment must be given the same: each grant carries its replica's cap to
// total_grant.lua, so the cap holds from a replica's first call, whatever Redis lost.
func (s *Store) MaxPodsTotal(n int64) {
	s.total.Store(max(n, 0))
}

// capped reports whether this replica enforces the total cap.
func (s *Store) capped() bool { return s.total.Load() > 0 }

// totalKeys are the extra keys of total_grant.lua.
func (s *Store) totalKeys() []string {
	return []string{s.keys.TotalEscrow(), s.keys.TotalWant(), s.keys.TotalGranted()}
}

// totalGrant runs total_grant.lua for n pods of the tenant's scope; a refusal is
// QUOTA_EXCEEDED (quota max_pods_total) with its details.
func (s *Store) totalGrant(ctx context.Context, tenant, scope string, n, weight int64, adopt, refill bool) error {
	r, err := s.call(ctx, totalGrant, ScopeKeys{}, s.totalKeys(), tenant, scope, n, max(weight, 1), ms(s.wall()), flag(adopt), flag(refill), s.total.Load())
	if err != nil {
		return err
	}
	if r.oneOf(0, "granted", "refused") == "granted" {
		return r.err()
	}
	limit, use, retry := r.int(1), r.int(2), r.int(3)
	if err := r.err(); err != nil {
		return err
	}
	if !refill {
		s.refusals.add(tenant)
	}
	e := warmpool.Errorf(warmpool.CodeQuotaExceeded, "the deployment is at its max_pods_total (%d of %d pods); tenant %q waits for its share", use, limit, tenant).Retry(int((retry + 999) / 1000))
	e.Details = &warmpool.QuotaDetails{Tenant: tenant, Quota: "max_pods_total", Limit: limit, Use: use}
	return e
}

// totalCredit runs total_credit.lua: n pods of the tenant's scope back to the total.
func (s *Store) totalCredit(ctx context.Context, tenant, scope string, n int64, unused bool) error {
	if n <= 0 {
		return nil
	}
	return s.call1(ctx, totalCredit, []string{s.keys.TotalEscrow()}, tenant, scope, n, ms(s.wall()), flag(unused))
}

// call1 runs a script of extra keys only whose answer is read by nobody.
func (s *Store) call1(ctx context.Context, sc *script, keys []string, args ...any) error {
	r, err := s.call(ctx, sc, ScopeKeys{}, keys, args...)
	if err != nil {
		return err
	}
	return r.err()
}

// settle gives back what the scope's allowances hold over its use (quota_trim.lua;
// the sessions' only with sessions) to its tenant's escrow and the total's: the step
// after a pod or a deploy leaves the scope, so that a release is at once another's to
// take, and the balance pass's.
func (s *Store) settle(ctx context.Context, scope string, sessions bool) error {
	r, err := s.call(ctx, quotaTrim, s.keys.Scope(scope), nil, flag(sessions))
	if err != nil {
		return err
	}
	off, tenant := [2]int64{r.int(0), r.int(1)}, r.str(2)
	if err := r.err(); err != nil {
		return err
	}
	var errs []error
	for i, dim := range quotaDims {
		if off[i] > 0 {
			_, err := s.tenantCredit(ctx, tenant, scope, dim, off[i], false)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BalanceGranted is the total cap's part of the tenants job: it makes every scope governed in pods on its first pass (a scope published later is governed
// by its publish), has the rivals above their fair shares give pods up
// (yieldShares), and runs a balance pass (BalanceTenant, by the tenant's published
// limits) of each tenant the total granted pods since, except those in done (balanced
// already). It is O(the granted tenants' scopes), and O(every scope) once. Nothing
// without the cap. Errors: STORE_UNAVAILABLE.
func (s *Store) BalanceGranted(ctx context.Context, done map[string]warmpool.TenantLimits) error {
	if !s.capped() {
		return nil
	}
	if !s.governedAll.Load() {
		if err := s.governAll(ctx); err != nil {
			return err
		}
		s.governedAll.Store(true)
	}
	if err := s.yieldShares(ctx); err != nil {
		return err
	}
	granted, err := s.takeGranted(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range granted {
		if _, ok := done[t]; ok {
			continue
		}
		l, _, err := s.TenantLimits(ctx, t)
		if err == nil {
			err = s.BalanceTenant(ctx, t, l)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// takeGranted runs total_taken.lua: the tenants granted pods since the last take.
func (s *Store) takeGranted(ctx context.Context) ([]string, error) {
	r, err := s.call(ctx, totalTaken, ScopeKeys{}, []string{s.keys.TotalGranted()})
	if err != nil {
		return nil, err
	}
	granted := r.strs(0)
	return granted, r.err()
}

// governAll makes every published scope governed by the quotas of its tenant and the
// cap (balanceScope), in the order of the global index.
func (s *Store) governAll(ctx context.Context) error {
	all, err := s.rdb.SMembers(ctx, s.keys.Scopes()).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	for _, scope := range all {
		tenant, err := s.rdb.HGet(ctx, s.keys.Scope(scope).Config, "tenant").Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return s.redisErr(ctx, err)
		}
		if err := s.governPublished(ctx, tenant, scope); err != nil {
			return err
		}
	}
	return nil
}

// yieldShares has each rival of the total cap (total_grant.lua) that holds more than
// its fair share give up what it holds over it, as far as the rivals below theirs lack
// of them and want it: the shares total_grant.lua grants by, computed alike from the total's
// escrow; the pods leave as quota_yield.lua retires them, and each that is purged
// goes back to the escrows (settle) and so to a rival below its share. It is
// O(the rivals) when none holds over its share.
func (s *Store) yieldShares(ctx context.Context) error {
	rivals, err := s.rdb.ZRangeByScore(ctx, s.keys.TotalWant(), &redis.ZRangeBy{Min: strconv.FormatInt(s.wall().UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	if len(rivals) < 2 {
		return nil
	}
	fields := []string{"pods"}
	for _, r := range rivals {
		fields = append(fields, "pods|"+r, "w|"+r, "want|"+r)
	}
	v, err := s.rdb.HMGet(ctx, s.keys.TotalEscrow(), fields...).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	n := func(i int) int64 { x, _ := strconv.ParseInt(str(v[i]), 10, 64); return x }
	limit, total := s.total.Load(), n(0)
	held, weight, want := make([]int64, len(rivals)), make([]int64, len(rivals)), make([]int64, len(rivals))
	var sumHeld, sumW int64
	for i := range rivals {
		held[i], weight[i], want[i] = n(1+3*i), max(n(2+3*i), 1), n(3+3*i)
		sumHeld, sumW = sumHeld+held[i], sumW+weight[i]
	}
	room := limit - (total - sumHeld)
	share := func(i int) int64 { return room * weight[i] / sumW }
	var lack int64
	for i := range rivals {
		lack += max(0, min(share(i)-held[i], want[i]))
	}
	var errs []error
	for i, t := range rivals {
		give := min(held[i]-share(i), lack)
		if give <= 0 {
			continue
		}
		lack -= give
		errs = append(errs, s.yieldTenant(ctx, t, give))
	}
	return errors.Join(errs...)
}

// yieldTenant has the tenant's scopes, one after the other, keep n pods leaving
// between them (quota_yield.lua).
func (s *Store) yieldTenant(ctx context.Context, tenant string, n int64) error {
	scopes, err := s.rdb.SMembers(ctx, s.keys.TenantScopes(tenant)).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	for _, scope := range scopes {
		if n <= 0 {
			return nil
		}
		leaving, err := s.quotaYield(ctx, scope, n)
		if err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
			return err
		}
		n -= leaving
	}
	return nil
}

// quotaYield runs quota_yield.lua: the scope's pods leaving once it retired what it
// had to for n.
func (s *Store) quotaYield(ctx context.Context, scope string, n int64) (int64, error) {
	r, err := s.call(ctx, quotaYield, s.keys.Scope(scope), nil, ms(s.wall()), n)
	if err != nil {
		return 0, err
	}
	leaving := r.int(0)
	return leaving, r.err()
}

// weightOf reads a tenant's weight from its published limits (1 when it has none).
func weightOf(v any) int64 {
	n, err := strconv.ParseInt(str(v), 10, 64)
	if err != nil || n < 1 {
		return warmpool.DefaultTenantWeight
	}
	return n
}

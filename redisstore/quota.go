package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// A tenant's quotas are enforced across Cluster slots by escrow (lib/quota.lua): the
// tenant's escrow HASH (TenantEscrow, on the tenant's slot) grants each of its scopes
// an allowance, which the scope keeps in its config (q_pods, q_sess) and its scripts
// check in the step that takes a pod or a session. Every move is ordered so that a
// failure between two steps leaves the escrow counting more than the scopes hold,
// never less: a grant is taken from the escrow before the scope's allowance rises,
// and allowance comes off the scope before the escrow gets it back. A replica that dies
// between two steps therefore leaves the tenant under-admitted by what was in flight,
// never over its quota.

// quotaTries bounds how often a call refused by its scope's allowance asks the escrow
// for more and runs again (other callers may take what was granted first).
const quotaTries = 4

// quotaAsk is a scope script's refusal for want of allowance (lib/quota.lua).
type quotaAsk struct {
	dim             string
	held, allowance int64
	tenant          string
	cpu, mem        int64
}

// callQuota runs a script that may refuse for want of allowance as call does; on such
// a refusal it asks the tenant's escrow for the allowance and runs the script again.
// Errors: QUOTA_EXCEEDED (the escrow refused: the tenant is at a quota),
// NO_POD_AVAILABLE (others kept taking what was granted), and call's.
// A warm refill (refill) yields to other tenants' live demand under the total cap.
func (s *Store) callQuota(ctx context.Context, sc *script, k ScopeKeys, extra []string, refill bool, args ...any) (*reply, error) {
	for try := 1; ; try++ {
		r, err := s.call(ctx, sc, k, extra, args...)
		if err != nil || len(r.fields) == 0 || r.fields[0] != "quota" {
			return r, err
		}
		q := quotaAsk{dim: r.oneOf(1, "pods", "sessions"), held: r.int(2), allowance: r.int(3), tenant: r.str(4), cpu: r.int(5), mem: r.int(6)}
		if err := r.err(); err != nil {
			return nil, err
		}
		if try == quotaTries {
			return nil, warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: its tenant's allowance was taken by other calls %d times in a row; retry", k.ID, quotaTries).Retry(1)
		}
		if err := s.grant(ctx, k.ID, q, refill); err != nil {
			return nil, err
		}
	}
}

// grant takes what the scope needs from its tenant's escrow, and pods from the total
// cap's too, and raises the scope's allowance by it; a scope no longer governed gives
// it back, as does a tenant the total refuses.
func (s *Store) grant(ctx context.Context, scope string, q quotaAsk, refill bool) error {
	n := q.held + 1 - q.allowance
	weight, err := s.tenantGrant(ctx, q.tenant, scope, q.dim, n, q.cpu, q.mem, false, refill)
	if err != nil {
		return err
	}
	total := q.dim == "pods" && s.capped()
	if total {
		if err := s.totalGrant(ctx, q.tenant, scope, n, weight, false, refill); err != nil {
			cleanup, cancel := CleanupContext(ctx)
			defer cancel()
			_, cerr := s.escrowCredit(cleanup, q.tenant, scope, q.dim, n, true)
			return errors.Join(err, cerr)
		}
	}
	applied, err := s.quotaApply(ctx, scope, q.dim, n)
	if err == nil && applied {
		return nil
	}
	cleanup, cancel := CleanupContext(ctx)
	defer cancel()
	if _, cerr := s.tenantCredit(cleanup, q.tenant, scope, q.dim, n, true); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// tenantGrant runs tenant_grant.lua; it answers the tenant's weight. A refusal is
// QUOTA_EXCEEDED with its details, counted unless it refused a warm refill.
func (s *Store) tenantGrant(ctx context.Context, tenant, scope, dim string, n, cpu, mem int64, adopt, refill bool) (int64, error) {
	r, err := s.call(ctx, tenantGrant, ScopeKeys{}, []string{s.keys.Tenant(tenant), s.keys.TenantEscrow(tenant)},
		scope, dim, n, cpu, mem, ms(s.wall()), flag(adopt))
	if err != nil {
		return 0, err
	}
	if r.oneOf(0, "granted", "refused") == "granted" {
		return weightOf(r.str(1)), r.err()
	}
	d := &warmpool.QuotaDetails{Tenant: tenant, Quota: r.str(1)}
	limit, use, retry := r.int(2), r.int(3), r.int(4)
	if err := r.err(); err != nil {
		return 0, err
	}
	switch d.Quota {
	case "max_cpu":
		d.Limit, d.Use = warmpool.FormatMilli(limit), warmpool.FormatMilli(use)
	case "max_memory":
		d.Limit, d.Use = warmpool.FormatBytes(limit), warmpool.FormatBytes(use)
	default:
		d.Limit, d.Use = limit, use
	}
	if !refill {
		s.refusals.add(tenant)
	}
	e := warmpool.Errorf(warmpool.CodeQuotaExceeded, "tenant %q is at its %s (%v of %v)", tenant, d.Quota, d.Use, d.Limit).Retry(int((retry + 999) / 1000))
	e.Details = d
	return 0, e
}

// tenantCredit runs tenant_credit.lua: n units of dim back from the scope to its
// tenant's escrow (at most what the tenant granted the scope), and the pods that came
// back to the total cap's as well; unused says they were a grant never used, not a
// release. Every pod the total granted a scope was granted by the scope's tenant
// first, so the tenant's count bounds what goes back: the total counts a scope's
// grants of every tenant it named, and a scope that moved keeps its new tenant's
// counted when the old one's pass gives back all the old one granted.
func (s *Store) tenantCredit(ctx context.Context, tenant, scope, dim string, n int64, unused bool) (int64, error) {
	back, err := s.escrowCredit(ctx, tenant, scope, dim, n, unused)
	if err == nil && dim == "pods" && s.capped() {
		err = s.totalCredit(ctx, tenant, scope, back, unused)
	}
	return back, err
}

// escrowCredit is tenantCredit's part on the tenant's escrow alone.
func (s *Store) escrowCredit(ctx context.Context, tenant, scope, dim string, n int64, unused bool) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	r, err := s.call(ctx, tenantCredit, ScopeKeys{}, []string{s.keys.TenantEscrow(tenant)}, scope, dim, n, ms(s.wall()), flag(unused))
	if err != nil {
		return 0, err
	}
	back := r.int(0)
	return back, r.err()
}

// allGranted, as a credit's amount, is all the scope was granted (tenant_credit.lua
// credits at most that).
const allGranted = 1 << 62

// quotaDims are the dimensions of an allowance, in quota_trim.lua's and
// quota_govern.lua's order, and the config fields that hold them.
var quotaDims = [2]string{"pods", "sessions"}

// governs reports which dimensions the limits govern: pods (with cpu and memory, and
// always under the total cap) and sessions.
func (s *Store) governs(l warmpool.TenantLimits) [2]bool {
	return [2]bool{l.Pods >= 0 || l.MilliCPU >= 0 || l.MemoryBytes >= 0 || s.capped(), l.Sessions >= 0}
}

// BalanceLease is how long one replica's balance pass of a tenant keeps others off it.
const BalanceLease = 30 * time.Second

// BalanceTenant is one balance pass of the tenant whose limits are l (the published
// ones, Unlimited when it has none): each scope naming it becomes governed in the
// dimensions l limits (the escrow adopting what it holds) and stops being governed in
// the others; a governed scope gives back the allowance it does not use; a scope that
// no longer names the tenant gives back all it was granted. One replica runs a
// tenant's pass at a time (a lease lock); a pass another holds is skipped, as nothing.
// It is O(the tenant's scopes). Errors: STORE_UNAVAILABLE.
func (s *Store) BalanceTenant(ctx context.Context, tenant string, l warmpool.TenantLimits) error {
	lock, err := s.Obtain(ctx, s.keys.TenantEscrow(tenant)+":balance", BalanceLease)
	if errors.Is(err, warmpool.ErrNotObtained) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		cleanup, cancel := CleanupContext(ctx)
		defer cancel()
		_ = lock.Release(cleanup) // it expires by its lease otherwise
	}()
	members, err := s.rdb.SMembers(ctx, s.keys.TenantScopes(tenant)).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	escrow, err := s.rdb.HGetAll(ctx, s.keys.TenantEscrow(tenant)).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	gov := s.governs(l)
	trim := trimSessions(l, escrow["sessions"])
	named, idle := map[string]bool{}, map[string]bool{}
	var errs []error
	var naming []string
	for _, scope := range members {
		ok, q, err := s.balanceScope(ctx, tenant, scope, gov, trim)
		named[scope], idle[scope] = ok, q
		if ok {
			naming = append(naming, scope)
		}
		errs = append(errs, err)
	}
	errs = append(errs, s.balanceIdle(ctx, naming, idle, l.IdlePods))
	// Grants of scopes that no longer name the tenant (moved, forgotten) come back whole.
	for f := range escrow {
		dim, scope, ok := splitEscrowField(f)
		if !ok || named[scope] {
			continue
		}
		_, err := s.tenantCredit(ctx, tenant, scope, dim, allGranted, true)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// trimSessions reports whether a balance pass takes back the session allowance the
// tenant's scopes hold unused: only once what they were granted together (granted, the
// escrow's count) passes half of max_sessions. Further below, the allowances stay with
// the scopes that took them, so a new session asks the escrow (three more round trips)
// only where its scope reaches a new peak, not every time sessions come and go; from
// half the quota on, unused allowance comes back each pass, as another scope may need
// it.
func trimSessions(l warmpool.TenantLimits, granted string) bool {
	n, _ := strconv.ParseInt(granted, 10, 64)
	return l.Sessions >= 0 && 2*n > l.Sessions
}

// splitEscrowField reads a per-scope field of an escrow ("pods|<scope>",
// "sessions|<scope>").
func splitEscrowField(f string) (dim, scope string, ok bool) {
	for _, d := range quotaDims {
		if len(f) > len(d)+1 && f[:len(d)+1] == d+"|" {
			return d, f[len(d)+1:], true
		}
	}
	return "", "", false
}

// balanceScope is the balance pass of one scope of the tenant's index (trim: the
// session allowance it does not use comes back too, trimSessions); it reports
// whether the scope still names the tenant, and whether it has a share of its
// max_idle_pods (idle.go).
func (s *Store) balanceScope(ctx context.Context, tenant, scope string, gov [2]bool, trim bool) (named, idle bool, err error) {
	k := s.keys.Scope(scope)
	pipe := s.rdb.Pipeline()
	cfg := pipe.HMGet(ctx, k.Config, "tenant", "q_pods", "q_sess", "cpu_m", "memory_b", "q_idle")
	pods, deploys, sess := pipe.ZCard(ctx, k.Pods), pipe.ZCard(ctx, k.Deploying), pipe.HLen(ctx, k.Sessions)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, false, s.redisErr(ctx, err)
	}
	c := cfg.Val()
	if str(c[0]) != tenant {
		// governed by the tenant it named before: that one's pass ends it
		return false, false, nil
	}
	idle = c[5] != nil
	held := [2]int64{pods.Val() + deploys.Val(), sess.Val()}
	has := [2]bool{c[1] != nil, c[2] != nil}
	cpu, _ := strconv.ParseInt(str(c[3]), 10, 64)
	mem, _ := strconv.ParseInt(str(c[4]), 10, 64)
	var govern [2]string
	adopted := [2]int64{}
	for i := range quotaDims {
		switch {
		case gov[i] && !has[i]:
			if err := s.adopt(ctx, tenant, scope, quotaDims[i], held[i], cpu, mem); err != nil {
				return true, idle, err
			}
			govern[i], adopted[i] = strconv.FormatInt(held[i], 10), held[i]
		case !gov[i] && has[i]:
			govern[i] = "-"
		}
	}
	if govern != [2]string{} {
		set, err := s.quotaGovern(ctx, scope, govern)
		if err != nil {
			return true, idle, err
		}
		for i := range quotaDims {
			switch {
			case govern[i] == "-":
				_, err = s.tenantCredit(ctx, tenant, scope, quotaDims[i], allGranted, true)
			case govern[i] != "" && !set[i]:
				_, err = s.tenantCredit(ctx, tenant, scope, quotaDims[i], adopted[i], true)
			}
			if err != nil {
				return true, idle, err
			}
		}
	}
	if !has[0] && !has[1] {
		return true, idle, nil
	}
	if err := s.settle(ctx, scope, trim); err != nil {
		return true, idle, fmt.Errorf("balance %q: %w", scope, err)
	}
	return true, idle, nil
}

// adopt grants a scope becoming governed what it holds, from its tenant's escrow and,
// for pods, the total cap's.
func (s *Store) adopt(ctx context.Context, tenant, scope, dim string, held, cpu, mem int64) error {
	weight, err := s.tenantGrant(ctx, tenant, scope, dim, held, cpu, mem, true, false)
	if err != nil || dim != "pods" || !s.capped() || held <= 0 {
		return err
	}
	return s.totalGrant(ctx, tenant, scope, held, weight, true, false)
}

// quotaApply runs quota_apply.lua: it reports whether the scope was governed in dim
// and its allowance raised by n.
func (s *Store) quotaApply(ctx context.Context, scope, dim string, n int64) (bool, error) {
	r, err := s.call(ctx, quotaApply, s.keys.Scope(scope), nil, dim, n)
	if err != nil {
		return false, err
	}
	applied := r.int(0) == 1
	return applied, r.err()
}

// quotaGovern runs quota_govern.lua with each dimension's argument (an adopted
// allowance, "-" to end, "" to leave alone); set says, for each, whether it did.
func (s *Store) quotaGovern(ctx context.Context, scope string, args [2]string) (set [2]bool, err error) {
	r, err := s.call(ctx, quotaGovern, s.keys.Scope(scope), nil, args[0], args[1])
	if err != nil {
		return set, err
	}
	set = [2]bool{r.str(0) == "1", r.str(1) == "1"}
	return set, r.err()
}

// quotaRefusals counts the calls the escrow refused, by tenant, since the store started.
type quotaRefusals struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (q *quotaRefusals) add(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == nil {
		q.n = map[string]uint64{}
	}
	q.n[tenant]++
}

// QuotaRefusals are the calls this replica's store saw refused by a tenant's quota,
// by tenant, since it started (the metric warmpool_tenant_quota_refusals_total).
func (s *Store) QuotaRefusals() map[string]uint64 {
	s.refusals.mu.Lock()
	defer s.refusals.mu.Unlock()
	out := make(map[string]uint64, len(s.refusals.n))
	for t, n := range s.refusals.n {
		out[t] = n
	}
	return out
}

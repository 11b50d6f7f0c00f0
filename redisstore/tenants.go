package redisstore

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// tenantFields are the fields of a tenant's quotas hash, in TenantLimits' order.
var tenantFields = []string{"pods", "cpu_m", "memory_b", "sessions", "idle_pods", "weight"}

// PublishTenant writes the tenant's limits (warmpool.TenantQuotas), replacing what the
// tenant had. Errors: STORE_UNAVAILABLE.
func (s *Store) PublishTenant(ctx context.Context, tenant string, l warmpool.TenantLimits) error {
	key := s.keys.Tenant(tenant)
	values := []int64{l.Pods, l.MilliCPU, l.MemoryBytes, l.Sessions, l.IdlePods, l.Weight}
	args := make([]any, 0, 2*len(values))
	for i, v := range values {
		args = append(args, tenantFields[i], v)
	}
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, key)
	pipe.HSet(ctx, key, args...)
	if _, err := pipe.Exec(ctx); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// ForgetTenant drops the tenant's limits (warmpool.TenantQuotas): it has no limit
// from then on, and its scopes stay its. Errors: STORE_UNAVAILABLE.
func (s *Store) ForgetTenant(ctx context.Context, tenant string) error {
	if err := s.rdb.Del(ctx, s.keys.Tenant(tenant)).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// TenantLimits reads the tenant's published limits; ok is false when it has none.
// Errors: STORE_UNAVAILABLE.
func (s *Store) TenantLimits(ctx context.Context, tenant string) (l warmpool.TenantLimits, ok bool, err error) {
	v, err := s.rdb.HMGet(ctx, s.keys.Tenant(tenant), tenantFields...).Result()
	if err != nil {
		return l, false, s.redisErr(ctx, err)
	}
	l = warmpool.Unlimited()
	for i, p := range []*int64{&l.Pods, &l.MilliCPU, &l.MemoryBytes, &l.Sessions, &l.IdlePods, &l.Weight} {
		str, _ := v[i].(string)
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			*p, ok = n, true
		}
	}
	return l, ok, nil
}

// scopeUse is the reads of one scope of a tenant's index.
type scopeUse struct {
	scope                     string
	config                    *redis.SliceCmd
	pods, deploys, idle, sess *redis.IntCmd
}

// TenantUse sums what the scopes naming the tenant hold (warmpool.TenantQuotas): one
// read of the tenant's index and one pipeline over its scopes, O(its scopes). A
// member whose published config names another tenant, or that was forgotten, is not
// counted and leaves the index. A deleted scope's pods count until they are gone; the
// scope does not count in Scopes. Errors: STORE_UNAVAILABLE.
func (s *Store) TenantUse(ctx context.Context, tenant string) (warmpool.TenantUse, error) {
	index := s.keys.TenantScopes(tenant)
	members, err := s.rdb.SMembers(ctx, index).Result()
	if err != nil {
		return warmpool.TenantUse{}, s.redisErr(ctx, err)
	}
	var u warmpool.TenantUse
	if len(members) == 0 {
		return u, nil
	}
	pipe := s.rdb.Pipeline()
	reads := make([]scopeUse, len(members))
	for i, scope := range members {
		k := s.keys.Scope(scope)
		reads[i] = scopeUse{scope: scope,
			config:  pipe.HMGet(ctx, k.Config, "tenant", "cpu_m", "memory_b", "deleted"),
			pods:    pipe.ZCard(ctx, k.Pods),
			deploys: pipe.ZCard(ctx, k.Deploying),
			idle:    pipe.ZCard(ctx, k.Idle),
			sess:    pipe.HLen(ctx, k.Sessions),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return warmpool.TenantUse{}, s.redisErr(ctx, err)
	}
	var stale []any
	for _, r := range reads {
		cfg := r.config.Val()
		if named, _ := cfg[0].(string); named != tenant {
			stale = append(stale, r.scope)
			continue
		}
		cpu, _ := strconv.ParseInt(str(cfg[1]), 10, 64)
		mem, _ := strconv.ParseInt(str(cfg[2]), 10, 64)
		pods := r.pods.Val() + r.deploys.Val()
		u.Pods += pods
		u.MilliCPU += pods * cpu
		u.MemoryBytes += pods * mem
		u.IdlePods += r.idle.Val()
		u.Sessions += r.sess.Val()
		if cfg[3] == nil {
			u.Scopes++
		}
	}
	if err := s.unindexTenant(ctx, tenant, stale); err != nil {
		return warmpool.TenantUse{}, err
	}
	return u, nil
}

// unindexTenant takes scopes out of the tenant's index, then puts back each that a
// publish made the tenant's again meanwhile (its publish added it before its script
// ran, so the removal may have come between the two), as ScopeUnindex does.
func (s *Store) unindexTenant(ctx context.Context, tenant string, scopes []any) error {
	if len(scopes) == 0 {
		return nil
	}
	index := s.keys.TenantScopes(tenant)
	if err := s.rdb.SRem(ctx, index, scopes...).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	pipe := s.rdb.Pipeline()
	named := make([]*redis.StringCmd, len(scopes))
	for i, scope := range scopes {
		named[i] = pipe.HGet(ctx, s.keys.Scope(scope.(string)).Config, "tenant")
	}
	_, _ = pipe.Exec(ctx) // each reply's error is read below
	var back []any
	for i, n := range named {
		if err := n.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return s.redisErr(ctx, err)
		}
		if n.Val() == tenant {
			back = append(back, scopes[i])
		}
	}
	if len(back) > 0 {
		if err := s.rdb.SAdd(ctx, index, back...).Err(); err != nil {
			return s.redisErr(ctx, err)
		}
	}
	return nil
}

// str is a reply value as a string ("" for nil).
func str(v any) string {
	s, _ := v.(string)
	return s
}

package redisstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/warmpool/warmpool"
)

// A tenant's max_idle_pods (SPEC §12.1) bounds a state, not what its scopes take: a
// pod turns idle when its last session ends, in a script of its own scope, which no
// escrow on the tenant's slot can count. Each balance pass of the tenant therefore
// splits the quota over its scopes instead, max-min by what each wants (its idle
// target, or the warm pods it keeps when more), and gives each its share as an
// allowance (q_idle, quota_idle.lua): a warm refill stops at it, and the warm pods over
// it are retired at once. Lowered shares are written before raised ones, so the shares
// never sum above the quota and refills never take the tenant over it; pods that turn
// idle as sessions end may, until the next pass (a sweep tick) retires them.

// balanceIdle is the idle part of a balance pass over the scopes naming the tenant:
// with the quota (limit ≥ 0) each gets its share; without it the scopes that had one
// (idle) end it. Errors: STORE_UNAVAILABLE.
func (s *Store) balanceIdle(ctx context.Context, scopes []string, idle map[string]bool, limit int64) error {
	if limit < 0 {
		var errs []error
		for _, scope := range scopes {
			if idle[scope] {
				_, err := s.quotaIdle(ctx, scope, "-")
				errs = append(errs, skipGone(err))
			}
		}
		return errors.Join(errs...)
	}
	type want struct {
		scope     string
		want, had int64
		governed  bool
	}
	wants := make([]want, 0, len(scopes))
	for _, scope := range scopes {
		r, err := s.quotaIdle(ctx, scope, "?")
		if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			continue
		}
		if err != nil {
			return err
		}
		w := want{scope: scope, want: max(r.int(0), r.int(1))}
		w.had, err = strconv.ParseInt(r.str(2), 10, 64)
		w.governed = err == nil
		if err := r.err(); err != nil {
			return err
		}
		wants = append(wants, w)
	}
	each := make([]int64, len(wants))
	for i, w := range wants {
		each[i] = w.want
	}
	shares := idleShares(each, limit)
	var errs []error
	// lowered (or new) shares first, so that the shares never sum above the limit
	for _, lower := range []bool{true, false} {
		for i, w := range wants {
			if lower == (!w.governed || shares[i] < w.had) {
				_, err := s.quotaIdle(ctx, w.scope, strconv.FormatInt(shares[i], 10))
				errs = append(errs, skipGone(err))
			}
		}
	}
	return errors.Join(errs...)
}

// idleShares splits limit over wants max-min: each gets min(its want, the level), the
// highest level that fits; what no one wants is spread evenly over all (one more for
// the first ones), so that a pod turning idle between two passes has room.
func idleShares(wants []int64, limit int64) []int64 {
	if len(wants) == 0 {
		return nil
	}
	order := make([]int, len(wants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(wants[a], wants[b]) })
	shares := make([]int64, len(wants))
	left := limit
	for n, i := range order {
		shares[i] = min(wants[i], left/int64(len(order)-n))
		left -= shares[i]
	}
	for i := range shares {
		shares[i] += left / int64(len(shares))
		if int64(i) < left%int64(len(shares)) {
			shares[i]++
		}
	}
	return shares
}

// quotaIdle runs quota_idle.lua with its argument (quota_idle.lua's header).
func (s *Store) quotaIdle(ctx context.Context, scope, arg string) (*reply, error) {
	return s.call(ctx, quotaIdle, s.keys.Scope(scope), nil, ms(s.wall()), arg, s.sweepPeriod.Milliseconds())
}

// skipGone is err, but nil for a scope gone meanwhile (its pass has nothing to do).
func skipGone(err error) error {
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return nil
	}
	return err
}

package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// indexAtMost moves scope in its due shard to t unless it is indexed earlier already.
func (s *Store) indexAtMost(ctx context.Context, scope string, t int64) error {
	return s.rdb.ZAddLT(ctx, s.keys.DueIndex(DueShard(scope)), redis.Z{Score: float64(t), Member: scope}).Err()
}

// DueWriteTimeout bounds the due-index write that follows a script's due note, which
// runs on when the caller has gone.
const DueWriteTimeout = 2 * time.Second

// dueRetries are the due-index writes that failed on this store, each scope at the
// earliest time it was to be indexed at: RetryDueIndex writes them again. Nothing else
// would until the full pass (an hour by default), while the scope's work falls due.
type dueRetries struct {
	mu sync.Mutex
	at map[string]int64
}

// indexNoted writes a script's due note into the index. The script has committed: the
// write outlives the caller's context (a client gone right after its call must not
// take the scope out of the due sweeps), within DueWriteTimeout, and a failure does
// not fail the call. It is counted (ObserveDueIndexFailures) and kept for
// RetryDueIndex.
func (s *Store) indexNoted(ctx context.Context, scope string, t int64) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DueWriteTimeout)
	defer cancel()
	if err := s.indexAtMost(wctx, scope, t); err != nil {
		s.onDueFailure()
		s.keepDue(scope, t)
	}
}

// keepDue remembers that scope is to be indexed at t at the latest.
func (s *Store) keepDue(scope string, t int64) {
	s.dueRetries.mu.Lock()
	defer s.dueRetries.mu.Unlock()
	if s.dueRetries.at == nil {
		s.dueRetries.at = map[string]int64{}
	}
	if cur, ok := s.dueRetries.at[scope]; !ok || t < cur {
		s.dueRetries.at[scope] = t
	}
}

// ObserveDueIndexFailures makes the store call f for each due-index write after a
// script's note that failed, retries included (the metric
// warmpool_due_index_write_failures_total). Call it before the store is used; f must
// not block.
func (s *Store) ObserveDueIndexFailures(f func()) {
	s.onDueFailure = f
}

// RetryDueIndex writes again the due-index entries whose write after a script's note
// failed on this store; those that fail again are counted and kept for the next call.
// Nothing is sent when none failed. Every replica calls it every sweep tick
// (sweeper.Sweeper.Follow): a failed write is remembered by the replica it failed on.
// Errors: STORE_UNAVAILABLE when a write failed again.
func (s *Store) RetryDueIndex(ctx context.Context) error {
	s.dueRetries.mu.Lock()
	pending := s.dueRetries.at
	s.dueRetries.at = nil
	s.dueRetries.mu.Unlock()
	var failed error
	for scope, t := range pending {
		if err := s.indexAtMost(ctx, scope, t); err != nil {
			if ctx.Err() == nil {
				s.onDueFailure()
				failed = cmp.Or(failed, s.redisErr(ctx, err))
			}
			s.keepDue(scope, t)
		}
	}
	return failed
}

// DueScopes returns up to limit scopes of one shard of the due index whose sweep work
// is due at now, earliest first. Errors: STORE_UNAVAILABLE.
func (s *Store) DueScopes(ctx context.Context, shard int, now time.Time, limit int) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.keys.DueIndex(shard), &redis.ZRangeBy{Min: "-inf", Max: ms(now), Count: int64(limit)}).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	return ids, nil
}

// ScopeDue runs scope_due.lua after the sweeper looked at a scope: it sets the scope's
// due time to when its next sweep work falls due, and indexes the scope at that time
// (or takes it out of the index when nothing is due). It returns the due time and
// whether there is one. A script that noted earlier work meanwhile may have indexed
// the scope earlier and been overwritten here, so the scope's due key is read again
// after the index write and the earlier time restored. Errors: STORE_UNAVAILABLE.
func (s *Store) ScopeDue(ctx context.Context, scope string, now time.Time) (time.Time, bool, error) {
	at, ok, _, err := s.scopeDue(ctx, scope, now, false)
	return at, ok, err
}

// ScopeReindex is ScopeDue for the full pass's audit of the due index: it also reports
// whether the index was wrong, the scope missing from it or indexed later than the due
// time (its work would have been found late, or never), which the scripts' due notes
// should never leave. An index earlier than the due time is not wrong: the scope is
// looked at once more. Errors: STORE_UNAVAILABLE.
func (s *Store) ScopeReindex(ctx context.Context, scope string, now time.Time) (fixed bool, err error) {
	_, _, fixed, err = s.scopeDue(ctx, scope, now, true)
	return fixed, err
}

func (s *Store) scopeDue(ctx context.Context, scope string, now time.Time, audit bool) (at time.Time, ok, fixed bool, err error) {
	k := s.keys.Scope(scope)
	r, err := s.call(ctx, scopeDue, k, nil, ms(now), s.sweepPeriod.Milliseconds())
	if err != nil {
		return time.Time{}, false, false, err
	}
	v := r.str(0)
	if err := r.err(); err != nil {
		return time.Time{}, false, false, err
	}
	index := s.keys.DueIndex(DueShard(scope))
	var due int64
	if v == "" {
		err = s.rdb.ZRem(ctx, index, scope).Err()
	} else if due, err = strconv.ParseInt(v, 10, 64); err != nil {
		return time.Time{}, false, false, fmt.Errorf("scope_due.lua: malformed due time %q", v)
	} else {
		z := redis.Z{Score: float64(due), Member: scope}
		if audit {
			// LT with CH counts an entry added or lowered: missing, or later than due.
			var n int64
			n, err = s.rdb.ZAddArgs(ctx, index, redis.ZAddArgs{LT: true, Ch: true, Members: []redis.Z{z}}).Result()
			fixed = n > 0
		}
		if err == nil {
			err = s.rdb.ZAdd(ctx, index, z).Err()
		}
	}
	if err != nil {
		return time.Time{}, false, false, s.redisErr(ctx, err)
	}
	cur, err := s.rdb.Get(ctx, k.Due).Int64()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return time.Time{}, false, false, s.redisErr(ctx, err)
	case v == "" || cur < due:
		if err := s.indexAtMost(ctx, scope, cur); err != nil {
			return time.Time{}, false, false, s.redisErr(ctx, err)
		}
		v, due = "set", cur
	}
	if v == "" {
		return time.Time{}, false, fixed, nil
	}
	return time.UnixMilli(due), true, fixed, nil
}

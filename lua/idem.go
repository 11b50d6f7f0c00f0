package lua

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// pending marks an idempotency key whose first request is still running; answers are
// JSON documents, never empty.
const pending = ""

// Idempotent runs fn at most once at a time per key across replicas and caches its
// answer for ttl. A repeated call gets the cached answer (replayed = true); a call that
// arrives while the first one runs waits up to wait for its answer, polling every poll.
// Errors are not cached, so a retry after a failure runs again.
func (s *Store) Idempotent(ctx context.Context, key string, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (answer []byte, replayed bool, err error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		won, err := s.rdb.SetNX(ctx, key, pending, ttl).Result()
		if err != nil {
			return nil, false, s.redisErr(ctx, err)
		}
		if won {
			answer, err := fn()
			// The first request's work is done whatever the caller's ctx says now.
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err != nil {
				s.rdb.Del(bg, key)
				return nil, false, err
			}
			// Best effort: without the cached answer a replay runs again.
			s.rdb.Set(bg, key, answer, ttl)
			return answer, false, nil
		}
		v, err := s.rdb.Get(ctx, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue // the first request failed and let go: try to run it ourselves
		case err != nil:
			return nil, false, s.redisErr(ctx, err)
		case v != pending:
			return []byte(v), true, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-deadline.C:
			return nil, false, warmpool.Errorf(warmpool.CodeNoPodAvailable, "request is still running on another replica").Retry(1)
		case <-time.After(poll):
		}
	}
}

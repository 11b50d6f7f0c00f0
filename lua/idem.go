package lua

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
)

// pending marks an idempotency key whose first request is still running; answers are
// JSON documents, never empty.
const pending = ""

// Idempotent runs fn at most once at a time per key across replicas and caches its
// answer for ttl (idem_claim.lua takes the key, and never after its caller gave up). A
// repeated call gets the cached answer (replayed = true); a call that arrives while the
// first one runs waits up to wait for its answer, polling every poll. Errors are not
// cached, so a retry after a failure runs again.
func (s *Store) Idempotent(ctx context.Context, key string, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (answer []byte, replayed bool, err error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		r, err := s.call(ctx, idemClaim, "", []string{key}, ttl.Milliseconds())
		if err != nil {
			return nil, false, err
		}
		won := r.oneOf(0, "won", "taken") == "won"
		v := ""
		if !won {
			v = r.str(1)
		}
		if err := r.err(); err != nil {
			return nil, false, err
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
		if v != pending {
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

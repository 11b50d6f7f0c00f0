package sm

import (
	"context"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Deadline fixes a live session's expiry at ttl from now (with later, at the later of
// that and its expiry): routes, touches and agent reports do not move it from then on,
// and the session ends then (E2B's set_timeout and connect). It returns the expiry.
// A session that had expired is evicted now (its slot to the oldest waiter, or freed).
// Errors: VALIDATION, SCOPE_NOT_FOUND, SESSION_NOT_FOUND (unknown or expired),
// STORE_UNAVAILABLE.
func (m *Manager) Deadline(ctx context.Context, scope, session string, ttl time.Duration, later bool) (time.Time, error) {
	if err := checkIDs(scope, session); err != nil {
		return time.Time{}, err
	}
	if ttl < 0 {
		return time.Time{}, warmpool.Errorf(warmpool.CodeValidation, "ttl: must not be negative")
	}
	res, err := m.store.SessionDeadline(ctx, scope, session, m.clock.Now(), ttl, later)
	if err != nil {
		return time.Time{}, fmt.Errorf("deadline %s/%s: %w", scope, session, err)
	}
	if res.State != redisstore.DeadlineSet {
		return time.Time{}, redisstore.ErrNoSession
	}
	return res.Expiry, nil
}

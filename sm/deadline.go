package sm

import (
	"context"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// RouteOptions are the optional inputs of a route (RouteWith).
type RouteOptions struct {
	// RequestID, when set, makes a repeated call return the first answer.
	RequestID string
	// FixedTTL, when above zero, is the TTL of a binding the route makes, in place of
	// the scope's session_ttl_s, and fixes the session's expiry: routes, touches and
	// agent reports do not move it, Deadline does (E2B's sandbox timeout). A session
	// bound already keeps its expiry.
	FixedTTL time.Duration
	// Config is the session's session_config, sealed (SPEC §12.2): kept for the pod's
	// agent when the route binds the session; a session bound already keeps its own.
	Config []byte
}

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

package sm

import (
	"context"
	"time"

	"github.com/warmpool/warmpool/redisstore"
)

// State is what the session manager needs of the Redis state store
// (redisstore.Store): the sessions' scripts, the waiter queue's wake-ups, and the
// session's lease lock and request-id marks.
type State interface {
	SessionRoute(ctx context.Context, scope string, a redisstore.RouteArgs) (redisstore.RouteResult, error)
	SessionGet(ctx context.Context, scope, session string, now time.Time) (redisstore.SessionBinding, error)
	SessionTouch(ctx context.Context, scope, session string, now time.Time) (string, error)
	SessionDeadline(ctx context.Context, scope, session string, now time.Time, ttl time.Duration, later bool) (redisstore.DeadlineResult, error)
	SessionEnd(ctx context.Context, scope, session string, now time.Time) (bool, error)
	SessionEvict(ctx context.Context, scope string, now time.Time, limit int) (evicted, claims int, err error)
	WaiterLeave(ctx context.Context, scope, waiter string, now time.Time) error
	NewWake() *redisstore.Wake

	Keys() redisstore.Keyspace
	Obtain(ctx context.Context, key string, ttl time.Duration) (*redisstore.Lock, error)
	Held(ctx context.Context, key string) (bool, error)
	Idempotent(ctx context.Context, r redisstore.IdemRequest, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (redisstore.IdemResult, error)
}

var _ State = (*redisstore.Store)(nil)

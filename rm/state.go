package rm

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// State is what the resource manager needs of the Redis state store
// (redisstore.Store), by the state it changes.
type State interface {
	// pods and holds
	PodAcquire(ctx context.Context, scope string, a redisstore.AcquireArgs) (redisstore.AcquireResult, error)
	PodKnown(ctx context.Context, scope, pod string) (bool, error)
	PodPurge(ctx context.Context, scope, pod, reason string, idleSince *time.Time) ([]string, error)
	ClaimRelease(ctx context.Context, scope, claim string, now time.Time) (string, int, error)
	HoldTouch(ctx context.Context, scope, hold, pod string, now time.Time, config []byte) (time.Time, error)
	HoldRelease(ctx context.Context, scope, hold, pod string, now time.Time) (bool, error)
	Idempotent(ctx context.Context, r redisstore.IdemRequest, ttl, wait, poll time.Duration, fn func() ([]byte, error)) (redisstore.IdemResult, error)

	// deploys and their followers
	PodPlaceholder(ctx context.Context, scope string, now, leaseDeadline, noteDeadline time.Time) (redisstore.PlaceholderResult, error)
	DeployKeepAlive(ctx context.Context, scope, deploy string, ttl time.Duration, clock warmpool.Clock) (context.Context, func() error)
	PodRegister(ctx context.Context, scope, deploy string, pod warmpool.Pod, leaderClaim string, now, claimDeadline time.Time) (int, error)
	DeployAbort(ctx context.Context, scope, deploy, ver, reason string, lost bool, now, noteDeadline time.Time) (int, error)
	DeployETA(ctx context.Context, scope string, now time.Time) (eta time.Duration, ok bool, err error)
	LogDeploy(ctx context.Context, scope string, r redisstore.DeployRecord) error
	FollowerWait(ctx context.Context, scope, deploy, room, claim string, now time.Time) (redisstore.FollowerState, error)
	FollowerLeave(ctx context.Context, scope, room, claim string, now time.Time) error
	NewWake() *redisstore.Wake

	// scopes
	Scope(ctx context.Context, scope string) (redisstore.ScopeRecord, error)
	PoolSnapshot(ctx context.Context, scope string) (redisstore.Snapshot, error)
	PoolTarget(ctx context.Context, scope string, now time.Time) (redisstore.Target, error)
	ScopeDelete(ctx context.Context, scope string, version int64, noteDeadline time.Time) (int, error)
	ScopeForget(ctx context.Context, scope string) (bool, error)
}

var _ State = (*redisstore.Store)(nil)

package ui

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Pools is what the pool page needs of the Redis state store (redisstore.Store): a
// scope's published record, pool, target and recent deploys for its details, and the
// summary passes that replicas share under a lease.
type Pools interface {
	Keys() redisstore.Keyspace
	Obtain(ctx context.Context, key string, ttl time.Duration) (*redisstore.Lock, error)
	Scope(ctx context.Context, scope string) (redisstore.ScopeRecord, error)
	PoolSnapshot(ctx context.Context, scope string) (redisstore.Snapshot, error)
	PoolTarget(ctx context.Context, scope string, now time.Time) (redisstore.Target, error)
	RecentDeploys(ctx context.Context, scope string) ([]redisstore.DeployRecord, error)
	ScopeSummaries(ctx context.Context) ([]warmpool.ScopeSummary, error)
	ShareSummaries(ctx context.Context, p redisstore.SummaryPass, ttl time.Duration) error
	SharedSummaries(ctx context.Context) (redisstore.SummaryPass, bool, error)
}

var _ Pools = (*redisstore.Store)(nil)

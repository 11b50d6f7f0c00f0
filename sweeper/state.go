package sweeper

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/scopes"
)

// State is what the sweeper needs of the Redis state store (redisstore.Store), by
// what it keeps healthy. It publishes scopes through the config service, which takes
// the same store (scopes.Published).
type State interface {
	scopes.Published

	// the keyspace: its epoch, layout and the server it was built on
	Bootstrap(ctx context.Context, epoch string) (bool, error)
	EpochLive(ctx context.Context) (bool, error)
	MarkLayout(ctx context.Context) error
	CheckFailover(ctx context.Context) (bool, error)
	RecordReplicationID(ctx context.Context, force bool) error

	// the due index and the index of scopes
	DueScopes(ctx context.Context, shard int, now time.Time, limit int) ([]string, error)
	ScopeDue(ctx context.Context, scope string, now time.Time) (time.Time, bool, error)
	RetryDueIndex(ctx context.Context) error
	ScopeIDs(ctx context.Context) ([]string, error)
	ScopeIndex(ctx context.Context, scope string) (bool, error)
	ScopeReindex(ctx context.Context, scope string, now time.Time) (fixed bool, err error)
	ScopeUnindex(ctx context.Context, scope string) (bool, error)

	// scopes' pools
	ScopeAny(ctx context.Context, scope string) (redisstore.ScopeRecord, error)
	PoolSnapshot(ctx context.Context, scope string) (redisstore.Snapshot, error)
	PoolTarget(ctx context.Context, scope string, now time.Time) (redisstore.Target, error)
	ScopeRepair(ctx context.Context, scope string, now, noteDeadline time.Time, recount bool) (redisstore.RepairReport, error)
	FenceRaise(ctx context.Context, scope string, atLeast int64) error

	// pods
	PodAdopt(ctx context.Context, pod warmpool.Pod, now time.Time, sessionsUnknown bool) (string, error)
	PodKnown(ctx context.Context, scope, pod string) (bool, error)
	PodHealth(ctx context.Context, scope, pod string, ok bool) (int, error)
	PodPurge(ctx context.Context, scope, pod, reason string, idleSince *time.Time) ([]string, error)
	GhostPurge(ctx context.Context, scope, pod string) error

	// probes
	ProbePeriods(ctx context.Context, scopes []string) (map[string]time.Duration, error)
	ProbeWindow(ctx context.Context, shard int, now time.Time) (time.Time, []redisstore.PodRef, bool, error)
	Spared(ctx context.Context, shard int, refs []redisstore.PodRef, now time.Time) (map[redisstore.PodRef]bool, error)
	MarkFailing(ctx context.Context, ref redisstore.PodRef) error
	ClearFailing(ctx context.Context, shard int, refs []redisstore.PodRef) error
}

// Locks is what the Runner needs of the Redis state store: the jobs' locks.
type Locks interface {
	Keys() redisstore.Keyspace
	Obtain(ctx context.Context, key string, ttl time.Duration) (*redisstore.Lock, error)
}

var (
	_ State = (*redisstore.Store)(nil)
	_ Locks = (*redisstore.Store)(nil)
)

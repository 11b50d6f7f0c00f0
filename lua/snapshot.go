package lua

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// PodState is one registered pod with its occupancy.
type PodState struct {
	Pod warmpool.Pod
	// Slots counts sessions plus live claims on the pod.
	Slots int
	Idle  bool
	// IdleSince is set for idle pods.
	IdleSince time.Time
	// RegisteredAt is when the pod was registered (or adopted).
	RegisteredAt time.Time
}

// Snapshot is a consistent read of a scope's pool state (one MULTI), for status
// endpoints, sweepers and invariant checks.
type Snapshot struct {
	Pods      []PodState // in registration order
	Deploys   map[string]time.Time
	Followers map[string]time.Time
	Claims    map[string]time.Time
	ClaimPod  map[string]string
	Sessions  map[string]string // session id -> pod id
	SessExp   map[string]time.Time
	Waiters   map[string]time.Time
	Fence     int64
}

// Snapshot reads the whole pool state of a scope at once.
func (s *Store) Snapshot(ctx context.Context, scope string) (Snapshot, error) {
	k := s.keys.Scope(scope)
	pipe := s.rdb.TxPipeline()
	pods := pipe.ZRangeWithScores(ctx, k.Pods, 0, -1)
	info := pipe.HGetAll(ctx, k.PodInfo)
	slots := pipe.HGetAll(ctx, k.Slots)
	idle := pipe.ZRangeWithScores(ctx, k.Idle, 0, -1)
	deploys := pipe.ZRangeWithScores(ctx, k.Deploying, 0, -1)
	followers := pipe.ZRangeWithScores(ctx, k.Followers, 0, -1)
	claims := pipe.ZRangeWithScores(ctx, k.Claims, 0, -1)
	claimpod := pipe.HGetAll(ctx, k.ClaimPod)
	sessions := pipe.HGetAll(ctx, k.Sessions)
	sexp := pipe.ZRangeWithScores(ctx, k.SessExp, 0, -1)
	waiters := pipe.ZRangeWithScores(ctx, k.Waiters, 0, -1)
	fence := pipe.Get(ctx, k.Fence)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Snapshot{}, s.redisErr(ctx, err)
	}
	snap := Snapshot{
		Deploys:   zmap(deploys.Val()),
		Followers: zmap(followers.Val()),
		Claims:    zmap(claims.Val()),
		ClaimPod:  claimpod.Val(),
		Sessions:  sessions.Val(),
		SessExp:   zmap(sexp.Val()),
		Waiters:   zmap(waiters.Val()),
	}
	snap.Fence, _ = strconv.ParseInt(fence.Val(), 10, 64)
	snap.Pods = podStates(scope, pods.Val(), info.Val(), slots.Val(), zmap(idle.Val()))
	return snap, nil
}

func zmap(zs []redis.Z) map[string]time.Time {
	m := make(map[string]time.Time, len(zs))
	for _, z := range zs {
		m[z.Member.(string)] = time.UnixMilli(int64(z.Score))
	}
	return m
}

// PoolSnapshot reads a scope's pods and deploy leases in one MULTI, without the
// sessions, claims and waiters: what the sweepers need on every tick, at a cost that
// does not grow with the number of sessions.
func (s *Store) PoolSnapshot(ctx context.Context, scope string) (Snapshot, error) {
	k := s.keys.Scope(scope)
	pipe := s.rdb.TxPipeline()
	pods := pipe.ZRangeWithScores(ctx, k.Pods, 0, -1)
	info := pipe.HGetAll(ctx, k.PodInfo)
	slots := pipe.HGetAll(ctx, k.Slots)
	idle := pipe.ZRangeWithScores(ctx, k.Idle, 0, -1)
	deploys := pipe.ZRangeWithScores(ctx, k.Deploying, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Snapshot{}, s.redisErr(ctx, err)
	}
	snap := Snapshot{Deploys: zmap(deploys.Val())}
	snap.Pods = podStates(scope, pods.Val(), info.Val(), slots.Val(), zmap(idle.Val()))
	return snap, nil
}

func podStates(scope string, pods []redis.Z, info, slots map[string]string, idleSince map[string]time.Time) []PodState {
	out := make([]PodState, 0, len(pods))
	for _, z := range pods {
		id := z.Member.(string)
		p, err := decodePod(id, info[id])
		if err != nil {
			p = warmpool.Pod{ID: id, ScopeID: scope}
		}
		n, _ := strconv.Atoi(slots[id])
		since, isIdle := idleSince[id]
		out = append(out, PodState{Pod: p, Slots: n, Idle: isIdle, IdleSince: since, RegisteredAt: time.UnixMilli(int64(z.Score))})
	}
	return out
}

// ScopeCounts are the sizes of a scope's pool, for listings.
type ScopeCounts struct {
	ScopeID   string
	DeployVer string
	Version   int64
	Pods      int64
	Idle      int64
	Sessions  int64
	Deploying int64
	Waiters   int64
}

// Counts reads the pool sizes of every published scope in one pipeline.
func (s *Store) Counts(ctx context.Context) ([]ScopeCounts, error) {
	ids, err := s.ScopeIDs(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	type cmds struct {
		cfg                                    *redis.SliceCmd
		pods, idle, sessions, deploys, waiters *redis.IntCmd
	}
	pipe := s.rdb.Pipeline()
	all := make([]cmds, len(ids))
	for i, id := range ids {
		k := s.keys.Scope(id)
		all[i] = cmds{
			cfg:      pipe.HMGet(ctx, k.Config, "deploy_ver", "version"),
			pods:     pipe.ZCard(ctx, k.Pods),
			idle:     pipe.ZCard(ctx, k.Idle),
			sessions: pipe.HLen(ctx, k.Sessions),
			deploys:  pipe.ZCard(ctx, k.Deploying),
			waiters:  pipe.ZCard(ctx, k.Waiters),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.redisErr(ctx, err)
	}
	out := make([]ScopeCounts, 0, len(ids))
	for i, id := range ids {
		c := all[i]
		v := c.cfg.Val()
		ver, _ := v[0].(string)
		if ver == "" {
			continue // listed but never published (or lost): reconcile repairs the index
		}
		version, _ := v[1].(string)
		n, _ := strconv.ParseInt(version, 10, 64)
		out = append(out, ScopeCounts{ScopeID: id, DeployVer: ver, Version: n, Pods: c.pods.Val(), Idle: c.idle.Val(),
			Sessions: c.sessions.Val(), Deploying: c.deploys.Val(), Waiters: c.waiters.Val()})
	}
	return out, nil
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
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
	// Claims counts the claims that hold a slot on the pod.
	Claims int
	Idle   bool
	// Retired: the pod is of a deleted scope (RetiredVer), even when a later version
	// made the scope live again: it is never handed out again, and goes when idle.
	Retired bool
	// Draining: the pod's agent reported that it drains (DrainingVer): it is never
	// handed out again, and goes once it has no session.
	Draining bool
	// IdleSince is set for idle pods.
	IdleSince time.Time
	// RegisteredAt is when the pod was registered (or adopted).
	RegisteredAt time.Time
	// Served counts the slots handed out on the pod over its life while the scope has
	// a max_sessions_per_pod (0 without one).
	Served int
}

// Sessions is the number of sessions on the pod: its slots less its claims, read from
// RM's keys alone.
func (p PodState) Sessions() int { return max(0, p.Slots-p.Claims) }

// Snapshot is a consistent read of a scope's pool state (one MULTI), for status
// endpoints, sweepers and invariant checks.
type Snapshot struct {
	Pods      []PodState // in registration order
	Deploys   map[string]time.Time
	Followers map[string]time.Time
	ClaimPod  map[string]string
	// Queued is the number of live waiters (those handed a slot and not bound yet
	// included).
	Queued int
	// Backoff is the scope's refill backoff (zero: none).
	Backoff Backoff
	// Prewarm is the prewarm of a rollout (zero: none; it runs while its Until is
	// ahead and the fields are there).
	Prewarm Prewarm
	// Set by Snapshot only (PoolSnapshot leaves them nil or zero):
	Claims   map[string]time.Time
	Sessions map[string]string // session id -> pod id
	SessExp  map[string]time.Time
	// Fixed are the sessions whose expiry is fixed (RouteArgs.FixedTTL).
	Fixed   []string
	Waiters map[string]time.Time
	// Queue holds the waiters still without a slot, by arrival number.
	Queue map[string]int64
	Fence int64
	// Version is the version of the scope's published config (0: none), read with the
	// rest, so that a check knows which config the state was under.
	Version int64
}

// Snapshot reads the whole state of a scope at once, every session included: for
// invariant checks.
func (s *Store) Snapshot(ctx context.Context, scope string) (Snapshot, error) {
	return s.snapshot(ctx, scope, true)
}

// PoolSnapshot reads a scope's pods, deploy leases, follower rooms and claims (RM's
// keys) and the waiter count in one MULTI, without the sessions: what the pool view
// and the sweepers need, at a cost that does not grow with the number of sessions.
func (s *Store) PoolSnapshot(ctx context.Context, scope string) (Snapshot, error) {
	return s.snapshot(ctx, scope, false)
}

func (s *Store) snapshot(ctx context.Context, scope string, full bool) (Snapshot, error) {
	k := s.keys.Scope(scope)
	pipe := s.rdb.TxPipeline()
	pods := pipe.ZRangeWithScores(ctx, k.Pods, 0, -1)
	info := pipe.HGetAll(ctx, k.PodInfo)
	podver := pipe.HGetAll(ctx, k.PodVer)
	slots := pipe.HGetAll(ctx, k.Slots)
	idle := pipe.ZRangeWithScores(ctx, k.Idle, 0, -1)
	deploys := pipe.ZRangeWithScores(ctx, k.Deploying, 0, -1)
	followers := pipe.ZRangeWithScores(ctx, k.Followers, 0, -1)
	claimpod := pipe.HGetAll(ctx, k.ClaimPod)
	queued := pipe.ZCard(ctx, k.Waiters)
	backoff := pipe.HGetAll(ctx, k.Backoff)
	served := pipe.HGetAll(ctx, k.Served)
	prewarm := pipe.HMGet(ctx, k.Config, "prewarm_ver", "prewarm_until")
	var claims, sexp, waiters, queue *redis.ZSliceCmd
	var sessions *redis.MapStringStringCmd
	var fixed *redis.StringSliceCmd
	var fence, version *redis.StringCmd
	if full {
		claims = pipe.ZRangeWithScores(ctx, k.Claims, 0, -1)
		sessions = pipe.HGetAll(ctx, k.Sessions)
		sexp = pipe.ZRangeWithScores(ctx, k.SessExp, 0, -1)
		fixed = pipe.SMembers(ctx, k.Fixed)
		waiters = pipe.ZRangeWithScores(ctx, k.Waiters, 0, -1)
		queue = pipe.ZRangeWithScores(ctx, k.Queue, 0, -1)
		fence = pipe.Get(ctx, k.Fence)
		version = pipe.HGet(ctx, k.Config, "version")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, s.redisErr(ctx, err)
	}
	snap := Snapshot{
		Deploys:   zmap(deploys.Val()),
		Followers: zmap(followers.Val()),
		ClaimPod:  claimpod.Val(),
		Queued:    int(queued.Val()),
		Backoff:   backoffOf(backoff.Val()),
		Prewarm:   prewarmOf(prewarm.Val()),
	}
	snap.Pods = podStates(scope, pods.Val(), info.Val(), podver.Val(), slots.Val(), zmap(idle.Val()), snap.ClaimPod)
	for i, p := range snap.Pods {
		snap.Pods[i].Served, _ = strconv.Atoi(served.Val()[p.Pod.ID]) // none counted: 0
	}
	if full {
		snap.Claims = zmap(claims.Val())
		snap.Sessions = sessions.Val()
		snap.SessExp = zmap(sexp.Val())
		snap.Fixed = fixed.Val()
		sort.Strings(snap.Fixed)
		snap.Waiters = zmap(waiters.Val())
		snap.Queue = make(map[string]int64, len(queue.Val()))
		for _, z := range queue.Val() {
			snap.Queue[fmt.Sprint(z.Member)] = int64(z.Score)
		}
		snap.Fence, _ = strconv.ParseInt(fence.Val(), 10, 64)     // no counter yet: 0
		snap.Version, _ = strconv.ParseInt(version.Val(), 10, 64) // no config: 0
	}
	return snap, nil
}

func zmap(zs []redis.Z) map[string]time.Time {
	m := make(map[string]time.Time, len(zs))
	for _, z := range zs {
		m[fmt.Sprint(z.Member)] = time.UnixMilli(int64(z.Score))
	}
	return m
}

// podStates builds the pods in registration order; a pod whose record is unreadable
// still shows, by its id.
func podStates(scope string, pods []redis.Z, info, podver, slots map[string]string, idleSince map[string]time.Time, claimPod map[string]string) []PodState {
	claims := map[string]int{} // a failed follower's "!reason" note names no pod
	for _, pod := range claimPod {
		claims[pod]++
	}
	out := make([]PodState, 0, len(pods))
	for _, z := range pods {
		id := fmt.Sprint(z.Member)
		p, err := decodePod(id, info[id])
		if err != nil {
			p = warmpool.Pod{ID: id, ScopeID: scope}
		}
		n, _ := strconv.Atoi(slots[id]) // no count yet: 0
		since, isIdle := idleSince[id]
		out = append(out, PodState{Pod: p, Slots: n, Claims: claims[id], Idle: isIdle, Retired: podver[id] == RetiredVer, Draining: podver[id] == DrainingVer, IdleSince: since,
			RegisteredAt: time.UnixMilli(int64(z.Score))})
	}
	return out
}

// Counts reads the pool sizes of every published scope in one pipeline, deleted ones
// left out; its cost grows with the number of scopes and pods, not with sessions. The
// target of a scope under warm_policy "demand" takes one more call (PoolTarget).
func (s *Store) Counts(ctx context.Context) ([]warmpool.ScopeCounts, error) {
	ids, err := s.ScopeIDs(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	type cmds struct {
		cfg                                               *redis.SliceCmd
		podver                                            *redis.StringSliceCmd
		pods, idle, sessions, deploys, followers, waiters *redis.IntCmd
		backoff                                           *redis.StringCmd
	}
	pipe := s.rdb.Pipeline()
	all := make([]cmds, len(ids))
	for i, id := range ids {
		k := s.keys.Scope(id)
		all[i] = cmds{
			cfg:       pipe.HMGet(ctx, k.Config, "deploy_ver", "version", "max_pods", "deleted", "min_idle", "warm_policy"),
			podver:    pipe.HVals(ctx, k.PodVer),
			pods:      pipe.ZCard(ctx, k.Pods),
			idle:      pipe.ZCard(ctx, k.Idle),
			sessions:  pipe.HLen(ctx, k.Sessions),
			deploys:   pipe.ZCard(ctx, k.Deploying),
			followers: pipe.ZCard(ctx, k.Followers),
			waiters:   pipe.ZCard(ctx, k.Waiters),
			backoff:   pipe.HGet(ctx, k.Backoff, "failures"),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.redisErr(ctx, err)
	}
	out := make([]warmpool.ScopeCounts, 0, len(ids))
	for i, id := range ids {
		c := all[i]
		v := c.cfg.Val()
		ver, _ := v[0].(string)
		if ver == "" {
			continue // listed but never published (or lost): reconcile repairs the index
		}
		if v[3] != nil {
			continue // deleted: its pods are on their way out
		}
		version, _ := v[1].(string)
		n, _ := strconv.ParseInt(version, 10, 64)
		maxPods, _ := v[2].(string)
		mp, _ := strconv.ParseInt(maxPods, 10, 64)
		var old int64
		for _, pv := range c.podver.Val() {
			if pv != ver {
				old++
			}
		}
		failures, _ := strconv.ParseInt(c.backoff.Val(), 10, 64) // no backoff: 0
		minIdle, _ := v[4].(string)
		target, _ := strconv.ParseInt(minIdle, 10, 64)
		if v[5] == warmpool.WarmDemand {
			t, err := s.PoolTarget(ctx, id, time.Now())
			if err != nil {
				return nil, err
			}
			target = int64(t.Idle)
		}
		out = append(out, warmpool.ScopeCounts{ScopeID: id, DeployVer: ver, Version: n, MaxPods: mp, Pods: c.pods.Val(), Idle: c.idle.Val(),
			OldPods: old, Sessions: c.sessions.Val(), Deploying: c.deploys.Val(), Followers: c.followers.Val(), Waiters: c.waiters.Val(),
			Backoff: failures, TargetIdle: target})
	}
	return out, nil
}

// backoffOf reads a refill backoff HASH; fields that do not parse read as zero.
func backoffOf(h map[string]string) Backoff {
	failures, _ := strconv.Atoi(h["failures"])
	until, _ := strconv.ParseInt(h["until"], 10, 64)
	if failures == 0 {
		return Backoff{}
	}
	return Backoff{Failures: failures, Until: time.UnixMilli(until), LastError: h["error"]}
}

// Prewarm is the prewarm of a rollout (SPEC §11.3, rollout "prewarm"): until Until,
// the pods of Ver (the deploy_ver a class A change replaced) take new sessions too.
type Prewarm struct {
	Ver   string
	Until time.Time
}

// Serves tells whether the prewarm at now lets the pods of ver take new sessions.
func (p Prewarm) Serves(ver string, now time.Time) bool {
	return p.Ver != "" && p.Ver == ver && now.Before(p.Until)
}

// prewarmOf reads the prewarm fields of a config HASH (HMGET prewarm_ver
// prewarm_until); missing or unreadable ones read as no prewarm.
func prewarmOf(v []any) Prewarm {
	ver, _ := v[0].(string)
	until, _ := v[1].(string)
	ms, err := strconv.ParseInt(until, 10, 64)
	if ver == "" || err != nil {
		return Prewarm{}
	}
	return Prewarm{Ver: ver, Until: time.UnixMilli(ms)}
}

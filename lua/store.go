package lua

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// Store runs the scripts and turns their answers into typed results and domain errors.
type Store struct {
	rdb  redis.UniversalClient
	keys Keyspace
}

// NewStore returns a Store over rdb with the given key prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: NewKeyspace(prefix)}
}

// Keys is the store's keyspace.
func (s *Store) Keys() Keyspace { return s.keys }

// Client is the underlying Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// ms formats a time as Redis's unit, milliseconds since the epoch.
func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// run runs a script and returns its reply as strings (an integer reply becomes one
// string). It maps transport failures to STORE_UNAVAILABLE and the scripts' EPOCH_LOST
// and NO_SCOPE answers to domain errors.
func (s *Store) run(ctx context.Context, sc *redis.Script, scope string, keys []string, args ...any) ([]string, error) {
	v, err := sc.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	var out []string
	switch r := v.(type) {
	case []any:
		out = make([]string, len(r))
		for i, x := range r {
			out[i] = fmt.Sprint(x)
		}
	default:
		out = []string{fmt.Sprint(r)}
	}
	if len(out) > 0 {
		switch out[0] {
		case "EPOCH_LOST":
			return nil, warmpool.ErrEpochLost
		case "NO_SCOPE":
			return nil, s.noScope(ctx, scope)
		}
	}
	return out, nil
}

// noScope tells an unknown scope from a Redis that lost every key: when the global
// epoch is missing too, the data is gone and requests fail closed.
func (s *Store) noScope(ctx context.Context, scope string) error {
	n, err := s.rdb.Exists(ctx, s.keys.Epoch()).Result()
	if err != nil {
		return s.redisErr(ctx, err)
	}
	if n == 0 {
		return warmpool.ErrEpochLost
	}
	return warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has no config", scope)
}

// redisErr maps a go-redis error: a cancelled context passes through, a script or
// command bug is INTERNAL, anything about reaching Redis is STORE_UNAVAILABLE.
func (s *Store) redisErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK"} {
			if strings.HasPrefix(msg, p) {
				return &warmpool.Error{Code: warmpool.CodeStoreUnavailable, Message: "redis: " + msg, RetryAfter: 1}
			}
		}
		return fmt.Errorf("redis script: %w", err)
	}
	return &warmpool.Error{Code: warmpool.CodeStoreUnavailable, Message: "redis unavailable: " + err.Error(), RetryAfter: 1}
}

// ---- scope config publication ----

// ScopeRecord is a scope's config as published in Redis.
type ScopeRecord struct {
	ScopeID   string
	Config    warmpool.ScopeConfig
	Version   int64
	DeployVer string
}

// PublishScope writes the scope's config to Redis so every replica routes with it at
// once, and adds the scope to the global index. An older version never overwrites a
// newer one. A new scope gets its epoch key when the keyspace itself is live, so a
// scope never becomes routable in the middle of a rebuild.
func (s *Store) PublishScope(ctx context.Context, rec ScopeRecord) error {
	k := s.keys.Scope(rec.ScopeID)
	deploy, err := json.Marshal(rec.Config.Deploy)
	if err != nil {
		return err
	}
	full, err := json.Marshal(rec.Config)
	if err != nil {
		return err
	}
	p := rec.Config.Pool
	epoch, err := s.rdb.Get(ctx, s.keys.Epoch()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.redisErr(ctx, err)
	}
	args := []any{rec.Version, epoch,
		"deploy_ver", rec.DeployVer,
		"version", rec.Version,
		"max_pods", p.MaxPods(),
		"parallel", p.ParallelDeploys(),
		"pod_concurrency", p.PodConcurrency,
		"min_idle", p.MinIdlePods,
		"pod_ttl_ms", int64(p.PodTTLS) * 1000,
		"session_ttl_ms", int64(p.SessionTTLS) * 1000,
		"queue_size", p.QueueSize,
		"wait_ms", int64(p.WaitTimeoutS) * 1000,
		"ready_ms", int64(rec.Config.Deploy.ReadyTimeoutS) * 1000,
		"deploy", string(deploy),
		"config", string(full),
	}
	if _, err := s.run(ctx, ScopePublish, rec.ScopeID, []string{k.Config, k.Epoch}, args...); err != nil {
		return err
	}
	if err := s.rdb.SAdd(ctx, s.keys.Scopes(), rec.ScopeID).Err(); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// Scope reads the published config of a scope. Errors: SCOPE_NOT_FOUND,
// STORE_UNAVAILABLE (also when Redis lost its data).
func (s *Store) Scope(ctx context.Context, scope string) (ScopeRecord, error) {
	v, err := s.rdb.HMGet(ctx, s.keys.Scope(scope).Config, "config", "version", "deploy_ver").Result()
	if err != nil {
		return ScopeRecord{}, s.redisErr(ctx, err)
	}
	raw, _ := v[0].(string)
	if raw == "" {
		return ScopeRecord{}, s.noScope(ctx, scope)
	}
	rec := ScopeRecord{ScopeID: scope}
	if err := json.Unmarshal([]byte(raw), &rec.Config); err != nil {
		return ScopeRecord{}, fmt.Errorf("scope %q: published config: %w", scope, err)
	}
	ver, _ := v[1].(string)
	rec.Version, _ = strconv.ParseInt(ver, 10, 64)
	rec.DeployVer, _ = v[2].(string)
	return rec, nil
}

// ScopeIDs lists the published scopes.
func (s *Store) ScopeIDs(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.keys.Scopes()).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	return ids, nil
}

// Bootstrap writes the global epoch when it is missing and gives every published scope
// its epoch key. Call it on an empty Redis, or after a rebuild restored the pool.
// It returns whether the keyspace was already live.
func (s *Store) Bootstrap(ctx context.Context, epoch string) (bool, error) {
	fresh, err := s.rdb.SetNX(ctx, s.keys.Epoch(), epoch, 0).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	cur, err := s.rdb.Get(ctx, s.keys.Epoch()).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	ids, err := s.ScopeIDs(ctx)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		if err := s.rdb.SetNX(ctx, s.keys.Scope(id).Epoch, cur, 0).Err(); err != nil {
			return false, s.redisErr(ctx, err)
		}
	}
	return !fresh, nil
}

// EpochLive reports whether the global epoch key exists.
func (s *Store) EpochLive(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Epoch()).Result()
	if err != nil {
		return false, s.redisErr(ctx, err)
	}
	return n == 1, nil
}

// ---- pods ----

// Acquire outcomes.
const (
	AcquireWarm       = "warm"
	AcquireFollower   = "follower"
	AcquireDeploy     = "deploy"
	AcquireMaxReached = "max_reached"
)

// AcquireArgs are the times and ids of one acquire.
type AcquireArgs struct {
	Now           time.Time
	Claim         string
	ClaimDeadline time.Time
	LeaseDeadline time.Time
	// RoomMargin is how much longer than the scope's ready timeout a follower waits.
	RoomMargin time.Duration
}

// AcquireResult is pod_acquire.lua's answer.
type AcquireResult struct {
	Kind string
	// Pod is set for AcquireWarm.
	Pod warmpool.Pod
	// Deploy is the deploy member (lease) led or followed.
	Deploy string
	// Room is the follower's room member and RoomDeadline the end of its wait
	// (AcquireFollower).
	Room         string
	RoomDeadline time.Time
	// Fence and Spec are set for AcquireDeploy.
	Fence int64
	Spec  warmpool.DeploySpec
	// Pods and Deploys are the counts seen at AcquireMaxReached.
	Pods, Deploys int
}

// Acquire runs pod_acquire.lua.
func (s *Store) Acquire(ctx context.Context, scope string, a AcquireArgs) (AcquireResult, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, PodAcquire, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.Deploying, k.Followers, k.Claims, k.ClaimPod, k.Fence},
		ms(a.Now), a.Claim, ms(a.ClaimDeadline), ms(a.LeaseDeadline), a.RoomMargin.Milliseconds())
	if err != nil {
		return AcquireResult{}, err
	}
	res := AcquireResult{Kind: out[0]}
	switch res.Kind {
	case AcquireWarm:
		res.Pod, err = decodePod(out[1], out[2])
	case AcquireFollower:
		res.Deploy, res.Room = out[1], out[2]
		d, _ := strconv.ParseInt(out[3], 10, 64)
		res.RoomDeadline = time.UnixMilli(d)
	case AcquireDeploy:
		res.Deploy = out[1]
		res.Fence, _ = strconv.ParseInt(out[2], 10, 64)
		err = json.Unmarshal([]byte(out[3]), &res.Spec)
	case AcquireMaxReached:
		res.Pods, _ = strconv.Atoi(out[1])
		res.Deploys, _ = strconv.Atoi(out[2])
	default:
		err = fmt.Errorf("pod_acquire: unexpected answer %q", out)
	}
	return res, err
}

func decodePod(id, raw string) (warmpool.Pod, error) {
	var p warmpool.Pod
	if raw == "" {
		return p, fmt.Errorf("pod %q has no info", id)
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return p, fmt.Errorf("pod %q info: %w", id, err)
	}
	p.ID = id
	return p, nil
}

// ErrFenced: a deploy lease expired before its pod could be registered; the pod must be
// deleted, not committed.
var ErrFenced = errors.New("deploy lease lost before register")

// Register runs pod_register.lua: it commits pod under the deploy lease and hands it to
// the followers of that deploy and to leaderClaim (when not empty). It returns the slots
// now claimed on the pod. Errors: ErrFenced, EPOCH_LOST.
func (s *Store) Register(ctx context.Context, scope, deploy string, pod warmpool.Pod, leaderClaim string, now, claimDeadline time.Time) (int, error) {
	k := s.keys.Scope(scope)
	info, err := json.Marshal(pod)
	if err != nil {
		return 0, err
	}
	out, err := s.run(ctx, PodRegister, scope,
		[]string{k.Epoch, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.Deploying, k.Followers, k.Claims, k.ClaimPod},
		ms(now), deploy, pod.ID, pod.DeployVer, string(info), leaderClaim, ms(claimDeadline))
	if err != nil {
		return 0, err
	}
	if out[0] == "FENCED" {
		return 0, ErrFenced
	}
	n, _ := strconv.Atoi(out[1])
	return n, nil
}

// ExtendDeploy extends a deploy lease; false means the lease is lost.
func (s *Store) ExtendDeploy(ctx context.Context, scope, deploy string, now, deadline time.Time) (bool, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, DeployExtend, scope, []string{k.Deploying}, deploy, ms(now), ms(deadline))
	if err != nil {
		return false, err
	}
	return out[0] == "1", nil
}

// AbortDeploy gives up a deploy lease and fails its followers with reason. It returns
// how many followers were failed.
func (s *Store) AbortDeploy(ctx context.Context, scope, deploy, reason string, noteDeadline time.Time) (int, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, DeployAbort, scope, []string{k.Deploying, k.Followers, k.Claims, k.ClaimPod}, deploy, reason, ms(noteDeadline))
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(out[0])
	return n, nil
}

// Follower states.
const (
	FollowerReady   = "ready"
	FollowerFailed  = "failed"
	FollowerWaiting = "wait"
)

// FollowerState is follower_wait.lua's answer.
type FollowerState struct {
	State  string
	Pod    warmpool.Pod
	Reason string
}

// WaitFollower reports where a follower stands.
func (s *Store) WaitFollower(ctx context.Context, scope, deploy, room, claim string, now time.Time) (FollowerState, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, FollowerWait, scope, []string{k.Deploying, k.Followers, k.ClaimPod, k.PodInfo}, deploy, room, claim, ms(now))
	if err != nil {
		return FollowerState{}, err
	}
	st := FollowerState{State: out[0]}
	switch st.State {
	case FollowerReady:
		st.Pod, err = decodePod(out[1], out[2])
	case FollowerFailed:
		st.Reason = out[1]
	}
	return st, err
}

// LeaveFollower takes a follower out of its room and gives back a claim it already got.
func (s *Store) LeaveFollower(ctx context.Context, scope, room, claim string, now time.Time) error {
	k := s.keys.Scope(scope)
	_, err := s.run(ctx, FollowerLeave, scope, []string{k.Followers, k.Claims, k.ClaimPod, k.Pods, k.Slots, k.Idle}, room, claim, ms(now))
	return err
}

// ReleaseClaim gives back a claim. With idle set, a pod left with no slot goes idle;
// without, it stays handed out until IdleConsider. It returns the pod and its slots left
// (-1 when the claim held no pod).
func (s *Store) ReleaseClaim(ctx context.Context, scope, claim string, now time.Time, idle bool) (string, int, error) {
	k := s.keys.Scope(scope)
	flag := "0"
	if idle {
		flag = "1"
	}
	out, err := s.run(ctx, ClaimRelease, scope, []string{k.Claims, k.ClaimPod, k.Pods, k.Slots, k.Idle}, claim, ms(now), flag)
	if err != nil {
		return "", 0, err
	}
	n, _ := strconv.Atoi(out[1])
	return out[0], n, nil
}

// Release states.
const (
	ReleaseIdle    = "idle"
	ReleaseBusy    = "busy"
	ReleaseUnknown = "unknown"
)

// IdleConsider runs pod_release.lua and returns its state.
func (s *Store) IdleConsider(ctx context.Context, scope, pod string, now time.Time) (string, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, PodRelease, scope, []string{k.Epoch, k.Pods, k.Slots, k.Idle, k.Config}, ms(now), pod)
	if err != nil {
		return "", err
	}
	return out[0], nil
}

// ErrPodBusy: a conditional purge found the pod no longer idle since the given time.
var ErrPodBusy = errors.New("pod is no longer idle")

// Purge forgets a pod and releases its sessions, returning their ids. With idleSince
// set, the pod is purged only if it is still idle since exactly then (ErrPodBusy
// otherwise).
func (s *Store) Purge(ctx context.Context, scope, pod, reason string, idleSince *time.Time) ([]string, error) {
	k := s.keys.Scope(scope)
	cond := ""
	if idleSince != nil {
		cond = ms(*idleSince)
	}
	out, err := s.run(ctx, PodPurge, scope,
		[]string{k.Epoch, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.ClaimPod, k.Sessions, k.SessExp, k.Health, k.Gone(pod)},
		pod, reason, cond, GoneTTL.Milliseconds())
	if err != nil {
		return nil, err
	}
	if out[0] == "busy" {
		return nil, ErrPodBusy
	}
	return out[2:], nil
}

// Placeholder outcomes.
const (
	PlaceholderDeploy     = "deploy"
	PlaceholderEnough     = "enough"
	PlaceholderMaxReached = "max_reached"
	PlaceholderBusy       = "busy"
)

// PlaceholderResult is pod_placeholder.lua's answer.
type PlaceholderResult struct {
	Kind   string
	Deploy string
	Fence  int64
	Spec   warmpool.DeploySpec
}

// Placeholder reserves a warm-pool deploy lease when the scope lacks idle pods.
func (s *Store) Placeholder(ctx context.Context, scope string, now, leaseDeadline, noteDeadline time.Time) (PlaceholderResult, error) {
	k := s.keys.Scope(scope)
	out, err := s.run(ctx, PodPlaceholder, scope,
		[]string{k.Epoch, k.Config, k.Pods, k.PodVer, k.Slots, k.Idle, k.Deploying, k.Followers, k.Claims, k.ClaimPod, k.Fence},
		ms(now), ms(leaseDeadline), ms(noteDeadline))
	if err != nil {
		return PlaceholderResult{}, err
	}
	res := PlaceholderResult{Kind: out[0]}
	if res.Kind == PlaceholderDeploy {
		res.Deploy = out[1]
		res.Fence, _ = strconv.ParseInt(out[2], 10, 64)
		err = json.Unmarshal([]byte(out[3]), &res.Spec)
	}
	return res, err
}

// ---- locks ----

// ObtainLock takes (or renews) a lease lock for token.
func (s *Store) ObtainLock(ctx context.Context, key, token string, lease time.Duration) (bool, error) {
	out, err := s.run(ctx, LockObtain, "", []string{key}, token, lease.Milliseconds())
	if err != nil {
		return false, err
	}
	return out[0] == "1", nil
}

// ExtendLock extends a lease lock held by token; false means it is lost.
func (s *Store) ExtendLock(ctx context.Context, key, token string, lease time.Duration) (bool, error) {
	out, err := s.run(ctx, LockExtend, "", []string{key}, token, lease.Milliseconds())
	if err != nil {
		return false, err
	}
	return out[0] == "1", nil
}

// ReleaseLock releases a lease lock held by token; false means it was not held.
func (s *Store) ReleaseLock(ctx context.Context, key, token string) (bool, error) {
	out, err := s.run(ctx, LockRelease, "", []string{key}, token)
	if err != nil {
		return false, err
	}
	return out[0] == "1", nil
}

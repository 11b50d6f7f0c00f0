package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// DeployExtend runs deploy_extend.lua: it extends a deploy lease to deadline; false
// means the lease is lost.
func (s *Store) DeployExtend(ctx context.Context, scope, deploy string, now, deadline time.Time) (bool, error) {
	r, err := s.call(ctx, deployExtend, s.keys.Scope(scope), nil, deploy, ms(now), ms(deadline))
	if err != nil {
		return false, err
	}
	ok := r.flag(0)
	return ok, r.err()
}

// DeployKeepAlive keeps a deploy lease (a placeholder in the scope's deploying set,
// taken by pod_acquire.lua or pod_placeholder.lua) alive while its deploy runs, as
// Lock.KeepAlive does for a lock: it extends the lease to ttl past clock's now every
// ttl/3, and the context it returns is cancelled (cause ErrLockNotHeld) when the
// lease is lost. stop ends the extensions and returns the loss, if any.
func (s *Store) DeployKeepAlive(ctx context.Context, scope, deploy string, ttl time.Duration, clock warmpool.Clock) (context.Context, func() error) {
	return keepAlive(ctx, ttl, time.Now, func(ctx context.Context) (bool, error) {
		now := clock.Now()
		return s.DeployExtend(ctx, scope, deploy, now, now.Add(ttl))
	})
}

// DeployAbort runs deploy_abort.lua: it gives up a deploy lease (of a pod of deploy_ver
// ver) and tells its followers why: a deploy that failed fails them (FollowerFailed),
// one that was lost (lost: its lease was lost, or its register kept missing Redis)
// sends them to try again (FollowerLost). A failed deploy of the scope's current
// deploy_ver also counts toward its refill backoff, from now. The deploy's allowance
// of its tenant's quotas goes back (settle). It returns how many followers were told.
func (s *Store) DeployAbort(ctx context.Context, scope, deploy, ver, reason string, lost bool, now, noteDeadline time.Time) (int, error) {
	r, err := s.call(ctx, deployAbort, s.keys.Scope(scope), nil, deploy, reason, ms(noteDeadline), flag(lost),
		ver, ms(now), RefillBackoffBase.Milliseconds(), RefillBackoffMax.Milliseconds(), s.publishCmd())
	if err != nil {
		return 0, err
	}
	n := r.count(0)
	if r.err() == nil {
		_ = s.settle(ctx, scope, true) // as after PodPurge
	}
	return n, r.err()
}

// Follower states.
const (
	FollowerReady  = "ready"
	FollowerFailed = "failed"
	// FollowerLost: the deploy was lost before its pod was committed (its leader died
	// or lost its lease, or its register kept missing Redis); another try may succeed.
	FollowerLost    = "lost"
	FollowerWaiting = "wait"
	// FollowerRetry: the pod registered with no slot left for the follower
	// (pod_concurrency was lowered while it deployed); it acquires again.
	FollowerRetry = "retry"
)

// FollowerState is follower_wait.lua's answer.
type FollowerState struct {
	State  string
	Pod    warmpool.Pod
	Reason string
}

// FollowerWait runs follower_wait.lua: it reports where a follower stands.
func (s *Store) FollowerWait(ctx context.Context, scope, deploy, room, claim string, now time.Time) (FollowerState, error) {
	r, err := s.call(ctx, followerWait, s.keys.Scope(scope), nil, deploy, room, claim, ms(now))
	if err != nil {
		return FollowerState{}, err
	}
	st := FollowerState{State: r.oneOf(0, FollowerReady, FollowerFailed, FollowerLost, FollowerWaiting, FollowerRetry)}
	switch st.State {
	case FollowerReady:
		st.Pod = r.pod(1, 2)
	case FollowerFailed, FollowerLost:
		st.Reason = r.str(1)
	}
	return st, r.err()
}

// FollowerLeave runs follower_leave.lua: it takes a follower out of its room and gives
// back a claim it already got.
func (s *Store) FollowerLeave(ctx context.Context, scope, room, claim string, now time.Time) error {
	r, err := s.call(ctx, followerLeave, s.keys.Scope(scope), nil,
		append([]any{room, claim, ms(now)}, s.handoffArgs(now)...)...)
	if err != nil {
		return err
	}
	r.flag(0)
	return r.err()
}

// ClaimRelease runs claim_release.lua: it gives back a claim; its slot goes to the
// oldest waiter, or is freed (a pod left with no slot goes idle). It returns the pod and
// its slots left (-1 when the claim held no pod).
func (s *Store) ClaimRelease(ctx context.Context, scope, claim string, now time.Time) (string, int, error) {
	r, err := s.call(ctx, claimRelease, s.keys.Scope(scope), nil,
		append([]any{claim, ms(now)}, s.handoffArgs(now)...)...)
	if err != nil {
		return "", 0, err
	}
	pod, n := r.str(0), r.int(1)
	return pod, int(n), r.err()
}

// DeployETA reads how long the scope's soonest deploy in flight is expected to take
// until it is ready: the scope's deploy time estimate (kept by pod_register.lua) less
// the time each deploy in flight has run so far, not below zero. ok is false while
// the scope has no estimate yet or no deploy in flight with a known start.
// Errors: STORE_UNAVAILABLE.
func (s *Store) DeployETA(ctx context.Context, scope string, now time.Time) (eta time.Duration, ok bool, err error) {
	k := s.keys.Scope(scope)
	pipe := s.rdb.Pipeline()
	stats := pipe.HGetAll(ctx, k.DeployStats)
	deploys := pipe.ZRange(ctx, k.Deploying, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, false, s.redisErr(ctx, err)
	}
	est, err := strconv.ParseInt(stats.Val()["est"], 10, 64)
	if err != nil {
		return 0, false, nil // no deploy has finished yet
	}
	soonest := int64(-1)
	for _, d := range deploys.Val() {
		start, err := strconv.ParseInt(stats.Val()["start:"+d], 10, 64)
		if err != nil {
			continue
		}
		left := max(0, start+est-now.UnixMilli())
		if soonest < 0 || left < soonest {
			soonest = left
		}
	}
	if soonest < 0 {
		return 0, false, nil
	}
	return time.Duration(soonest) * time.Millisecond, true, nil
}

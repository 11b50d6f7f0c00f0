package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// Acquire outcomes.
const (
	AcquireWarm       = "warm"
	AcquireFollower   = "follower"
	AcquireDeploy     = "deploy"
	AcquireMaxReached = "max_reached"
	// AcquireBackoff: the deploy it would lead is held back by the refill backoff.
	AcquireBackoff = "backoff"
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
	// Fence and Spec are set for AcquireDeploy, and ReportIntervalS, the scope's
	// agent.report_interval_s that the pod is told (0: the config published has none).
	Fence           int64
	Spec            warmpool.DeploySpec
	ReportIntervalS int
	// Pods and Deploys are the counts seen at AcquireMaxReached; Deploys also at
	// AcquireBackoff.
	Pods, Deploys int
	// Backoff is set for AcquireBackoff.
	Backoff Backoff
}

// PodAcquire runs pod_acquire.lua: a warm pod, a place in the room of a deploy in
// flight, a new deploy lease, or max_reached.
func (s *Store) PodAcquire(ctx context.Context, scope string, a AcquireArgs) (AcquireResult, error) {
	r, err := s.callQuota(ctx, podAcquire, s.keys.Scope(scope), nil, false,
		append([]any{ms(a.Now), a.Claim, ms(a.ClaimDeadline), ms(a.LeaseDeadline), a.RoomMargin.Milliseconds()}, s.handoffArgs(a.Now)...)...)
	if err != nil {
		return AcquireResult{}, err
	}
	return decodeAcquire(r)
}

func decodeAcquire(r *reply) (AcquireResult, error) {
	res := AcquireResult{Kind: r.oneOf(0, AcquireWarm, AcquireFollower, AcquireDeploy, AcquireMaxReached, AcquireBackoff)}
	switch res.Kind {
	case AcquireWarm:
		res.Pod = r.pod(1, 2)
	case AcquireFollower:
		res.Deploy, res.Room, res.RoomDeadline = r.str(1), r.str(2), r.time(3)
	case AcquireDeploy:
		res.Deploy, res.Fence = r.str(1), r.int(2)
		r.json(3, &res.Spec)
		res.ReportIntervalS = int(r.int(4) / 1000)
	case AcquireMaxReached:
		res.Pods, res.Deploys = r.count(1), r.count(2)
	case AcquireBackoff:
		res.Backoff, res.Deploys = r.backoff(1), r.count(4)
	}
	return res, r.err()
}

// ErrFenced: a deploy lease expired before its pod could be registered; the pod must be
// deleted, not committed.
var ErrFenced = errors.New("deploy lease lost before register")

// PodRegister runs pod_register.lua: it commits pod under the deploy lease and hands it
// to the followers of that deploy and to leaderClaim (when not empty), and its other
// slots to queued waiters. It returns the slots now claimed on the pod. A pod the pool
// has already (an earlier try committed it) is answered with its slots, unchanged, so
// a register whose answer never came may be tried again.
// Errors: ErrFenced, EPOCH_LOST, STORE_UNAVAILABLE.
func (s *Store) PodRegister(ctx context.Context, scope, deploy string, pod warmpool.Pod, leaderClaim string, now, claimDeadline time.Time) (int, error) {
	info, err := json.Marshal(pod)
	if err != nil {
		return 0, err
	}
	r, err := s.call(ctx, podRegister, s.keys.Scope(scope), nil,
		append([]any{ms(now), deploy, pod.ID, pod.DeployVer, string(info), leaderClaim, ms(claimDeadline)}, s.handoffArgs(now)...)...)
	if err != nil {
		return 0, err
	}
	if r.oneOf(0, "ok", "FENCED") == "FENCED" {
		return 0, ErrFenced
	}
	n := r.count(1)
	return n, r.err()
}

// ErrPodBusy: a conditional purge found the pod no longer idle since the given time.
var ErrPodBusy = errors.New("pod is no longer idle")

// PodPurge runs pod_purge.lua: it forgets a pod and releases its sessions, returning
// their ids, and gives back the allowance of its tenant's quotas the scope no longer
// uses (settle). With idleSince set, the pod is purged only if it is still idle since
// exactly then (ErrPodBusy otherwise).
func (s *Store) PodPurge(ctx context.Context, scope, pod, reason string, idleSince *time.Time) ([]string, error) {
	return s.purge(ctx, scope, pod, reason, idleSince, false)
}

// GhostPurge is PodPurge of a pod the driver no longer has by the rebuild, while the
// keyspace is closed (pod_purge.lua's ARGV[5]): before it adopts the driver's pods,
// so that a scope never holds a pod a lost write purged beside one it adopts.
func (s *Store) GhostPurge(ctx context.Context, scope, pod string) error {
	_, err := s.purge(ctx, scope, pod, "gone from the driver (rebuild)", nil, true)
	return err
}

func (s *Store) purge(ctx context.Context, scope, pod, reason string, idleSince *time.Time, rebuild bool) ([]string, error) {
	k := s.keys.Scope(scope)
	cond := ""
	if idleSince != nil {
		cond = ms(*idleSince)
	}
	r, err := s.call(ctx, podPurge, k, []string{k.Gone(pod)}, pod, reason, cond, GoneTTL.Milliseconds(), flag(rebuild))
	if err != nil {
		return nil, err
	}
	if r.oneOf(0, "purged", "busy") == "busy" {
		return nil, ErrPodBusy
	}
	n, sessions := r.count(1), r.strs(2)
	if r.err() == nil && len(sessions) != n {
		r.fail("%d session ids, want %d", len(sessions), n)
	}
	if r.err() == nil {
		// The pod's allowance goes back at once; missed, it stays counted (never
		// over-admitted) until the tenants job's pass.
		_ = s.settle(ctx, scope, true)
	}
	return sessions, r.err()
}

// Placeholder outcomes.
const (
	PlaceholderDeploy     = "deploy"
	PlaceholderEnough     = "enough"
	PlaceholderMaxReached = "max_reached"
	PlaceholderBusy       = "busy"
	// PlaceholderBackoff: the refill backoff holds the deploy back.
	PlaceholderBackoff = "backoff"
	// PlaceholderQuota: the scope's tenant is at a quota; the refill waits for a release.
	PlaceholderQuota = "quota"
)

// Backoff is a scope's refill backoff (SPEC §11.3): Failures failed deploys of its
// current deploy_ver in a row, the last one's reason; no deploy starts before Until,
// and from then on one at a time. The zero value: no backoff.
type Backoff struct {
	Failures  int
	Until     time.Time
	LastError string
}

// The refill backoff's waits: RefillBackoffBase * 2^(failures - 1), at most
// RefillBackoffMax (SPEC §11.3).
const (
	RefillBackoffBase = 5 * time.Second
	RefillBackoffMax  = 5 * time.Minute
)

// PlaceholderResult is pod_placeholder.lua's answer.
type PlaceholderResult struct {
	Kind   string
	Deploy string
	Fence  int64
	Spec   warmpool.DeploySpec
	// ReportIntervalS is the scope's agent.report_interval_s that the pod is told (0:
	// the config published has none).
	ReportIntervalS int
	// Backoff is set for PlaceholderBackoff.
	Backoff Backoff
}

// PodPlaceholder runs pod_placeholder.lua: it reserves a warm-pool deploy lease when
// the scope lacks idle pods.
func (s *Store) PodPlaceholder(ctx context.Context, scope string, now, leaseDeadline, noteDeadline time.Time) (PlaceholderResult, error) {
	r, err := s.callQuota(ctx, podPlaceholder, s.keys.Scope(scope), nil, true,
		append([]any{ms(now), ms(leaseDeadline), ms(noteDeadline)}, append(s.handoffArgs(now), s.sweepPeriod.Milliseconds())...)...)
	if warmpool.ErrorCode(err) == warmpool.CodeQuotaExceeded {
		return PlaceholderResult{Kind: PlaceholderQuota}, nil
	}
	if err != nil {
		return PlaceholderResult{}, err
	}
	res := PlaceholderResult{Kind: r.oneOf(0, PlaceholderDeploy, PlaceholderEnough, PlaceholderMaxReached, PlaceholderBusy, PlaceholderBackoff)}
	switch res.Kind {
	case PlaceholderDeploy:
		res.Deploy, res.Fence = r.str(1), r.int(2)
		r.json(3, &res.Spec)
		res.ReportIntervalS = int(r.int(4) / 1000)
	case PlaceholderBackoff:
		res.Backoff = r.backoff(1)
	}
	return res, r.err()
}

// Adopt outcomes.
const (
	AdoptAdopted = "adopted"
	AdoptKnown   = "known"
	AdoptFull    = "full"
	// AdoptGone: the pod was purged within GoneTTL; it is not taken back.
	AdoptGone = "gone"
)

// GoneTTL is how long a purged pod's tombstone keeps reconcile from adopting it: longer
// than the purging job takes to delete it and than a driver's list lags behind.
const GoneTTL = 2 * time.Minute

// PodAdopt runs pod_adopt.lua: it takes a pod the driver has into the scope's pool.
// With sessionsUnknown (Redis lost the pod and whatever sessions it had), the pod may
// still serve old sessions: every slot of it stays taken until session_ttl_s has
// passed, then goes to waiters or idle. Otherwise the pod goes idle at once.
func (s *Store) PodAdopt(ctx context.Context, pod warmpool.Pod, now time.Time, sessionsUnknown bool) (string, error) {
	k := s.keys.Scope(pod.ScopeID)
	info, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	// A scope governed in pods takes the pod from its tenant's escrow (and the total
	// cap's) first, whatever the quota (it runs already), and gives it back unless the
	// adoption raised its allowance: after a failover that lost a purge, the pod a lost
	// grant deployed is counted, so no route is granted a pod over the quota beside it.
	took := false
	var tenant string
	for {
		r, err := s.call(ctx, podAdopt, k, []string{k.Gone(pod.ID)}, ms(now), pod.ID, pod.DeployVer, string(info), flag(sessionsUnknown), flag(took))
		st := ""
		if err == nil {
			st = r.oneOf(0, AdoptAdopted, AdoptKnown, AdoptFull, AdoptGone, "escrow")
			err = r.err()
		}
		if err == nil && st == "escrow" && !took {
			tenant = r.str(1)
			cpu, _ := strconv.ParseInt(r.str(2), 10, 64)
			mem, _ := strconv.ParseInt(r.str(3), 10, 64)
			if err := s.adopt(ctx, tenant, pod.ScopeID, "pods", 1, cpu, mem); err != nil {
				return "", err
			}
			took = true
			continue
		}
		if took && (err != nil || st != AdoptAdopted || r.str(1) != "1") {
			cleanup, cancel := CleanupContext(ctx)
			defer cancel()
			_, cerr := s.tenantCredit(cleanup, tenant, pod.ScopeID, "pods", 1, true)
			err = errors.Join(err, cerr)
		}
		return st, err
	}
}

// PodHealth runs pod_health.lua: it counts a pod's consecutive failed probes and
// returns the count.
func (s *Store) PodHealth(ctx context.Context, scope, pod string, ok bool) (int, error) {
	r, err := s.call(ctx, podHealth, s.keys.Scope(scope), nil, pod, flag(ok))
	if err != nil {
		return 0, err
	}
	n := r.count(0)
	return n, r.err()
}

// FenceRaise runs fence_raise.lua: it makes the scope's fencing counter at least atLeast.
func (s *Store) FenceRaise(ctx context.Context, scope string, atLeast int64) error {
	r, err := s.call(ctx, fenceRaise, s.keys.Scope(scope), nil, atLeast)
	if err != nil {
		return err
	}
	r.int(0)
	return r.err()
}

// Package rm is the resource manager: it hands out pods of a scope (a warm one, a place
// on a deploy in flight, or a new deploy under a lease), to the session manager as
// claims and to API callers as holds, takes them back, and forgets dead ones. Every
// state change is one Lua script (package redisstore, running the scripts of lua/).
package rm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Defaults of Config.
const (
	DefaultLease          = 30 * time.Second
	DefaultClaimTTL       = 30 * time.Second
	DefaultFollowerMargin = 10 * time.Second
	DefaultPollInterval   = 50 * time.Millisecond
	DefaultFollowerCheck  = 500 * time.Millisecond
	DefaultIdemTTL        = 60 * time.Second
)

// Config tunes a Manager; zero fields take the defaults above.
type Config struct {
	// Lease is the deploy lease: a leader that stops extending it (it died) loses its
	// deploy after this long. It is extended every Lease/3.
	Lease time.Duration
	// ClaimTTL is how long a slot handed out with a pod stays reserved for its caller.
	ClaimTTL time.Duration
	// FollowerMargin is how much longer than the ready timeout a follower waits.
	FollowerMargin time.Duration
	// PollInterval is how often a caller checks again on what it waits for: a lease
	// another deploy holds, an idempotent request in flight.
	PollInterval time.Duration
	// FollowerCheck is how often a follower checks on its deploy when no wake-up
	// came: its pod's register (and a failed deploy) wake it at once over the scope's
	// wake channel, and the check finds a leader that died, or a lost message.
	FollowerCheck time.Duration
	// IdemTTL is how long a hold is kept for replays of its request id.
	IdemTTL time.Duration
	Clock   warmpool.Clock
	Logger  *slog.Logger
	// Observe, when set, is told the outcome of every acquire (warm, deployed,
	// follower, max_reached, failed) and of every deploy.
	Observe func(event, outcome string)
	// OnDeploy, when set, is told of every deploy when it ends. It must not block.
	OnDeploy func(DeployReport)
	// Report, when set, is where the deployed pods report (SPEC §11.2): every
	// DeployRequest carries it to the driver.
	Report *warmpool.ReportTarget
}

// Deploy results.
const (
	DeployOK     = "ok"
	DeployFailed = "failed"
)

// DeployReport is one finished deploy: its result (DeployOK or DeployFailed), how long
// it took from the start of the driver's work, and the phases it went through.
type DeployReport struct {
	Scope  string
	Result string
	Took   time.Duration
	Phases []PhaseTime
}

// PhaseTime is one phase of a deploy (a warmpool.Phase* name): for
// warmpool.PhaseLeaseWait how long the lease took to get, for the driver's phases the
// time from the start of the driver's work until the phase was reached.
type PhaseTime struct {
	Phase   string
	Elapsed time.Duration
}

// Manager is the resource manager. It is safe for concurrent use.
type Manager struct {
	store  State
	wake   *redisstore.Wake
	driver warmpool.PodDriver
	cfg    Config
	clock  warmpool.Clock
	log    *slog.Logger

	// ctx bounds the deploys, which run detached from the requests that started them;
	// Close cancels it and waits for them. mu orders each deploy's wg.Add before
	// Close's Wait: once closed is set no deploy starts (goDeploy).
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// fill gives every field left out its default.
func (c *Config) fill() {
	defaults.Positive(&c.Lease, DefaultLease)
	defaults.Positive(&c.ClaimTTL, DefaultClaimTTL)
	defaults.Positive(&c.FollowerMargin, DefaultFollowerMargin)
	defaults.Positive(&c.PollInterval, DefaultPollInterval)
	defaults.Positive(&c.FollowerCheck, DefaultFollowerCheck)
	defaults.Positive(&c.IdemTTL, DefaultIdemTTL)
	c.Clock, c.Logger, c.Observe = defaults.Clock(c.Clock), defaults.Logger(c.Logger), defaults.Observer(c.Observe)
	if c.OnDeploy == nil {
		c.OnDeploy = func(DeployReport) {}
	}
}

// New returns a Manager over store and driver.
func New(store State, driver warmpool.PodDriver, cfg Config) *Manager {
	cfg.fill()
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		store: store, wake: store.NewWake(), driver: driver, cfg: cfg, clock: cfg.Clock,
		log: cfg.Logger.With("component", "rm"), ctx: ctx, cancel: cancel,
	}
}

// Close cancels the deploys in flight and waits until they have cleaned up; a deploy
// an acquire or a fill would start from then on is given up instead (goDeploy).
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.wake.Close()
}

// goDeploy runs f, a deploy, in a goroutine Close waits for, and reports true; once
// Close has begun it runs nothing and reports false.
func (m *Manager) goDeploy(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// errClosing is the answer of an acquire whose deploy the closing replica did not
// start: another replica can lead it.
func errClosing(scope string) error {
	return warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: this replica is shutting down and starts no deploy; retry", scope).Retry(1)
}

// abandon gives up the deploy lease of a deploy that was not started (the replica
// closes): its followers are told it was lost and try again elsewhere.
func (m *Manager) abandon(scope, deploy string, spec warmpool.DeploySpec) {
	ctx, cancel := redisstore.CleanupContext(context.Background())
	defer cancel()
	now := m.clock.Now()
	if _, err := m.store.DeployAbort(ctx, scope, deploy, spec.DeployVer(), "the replica shut down before the deploy started", true, now, now.Add(m.cfg.ClaimTTL)); err != nil {
		m.log.WarnContext(ctx, "deploy lease of a replica shutting down not given up; it expires by itself", "scope", scope, "err", err)
	}
}

// lostTries bounds how often an acquire starts again when the deploy it followed was
// lost.
const lostTries = 3

// Acquire hands out a pod of the scope: a warm pod of the current deploy_ver, else the
// pod of a deploy in flight (as a follower), else a pod it deploys itself (as the
// leader). The lease carries a claim: a slot reserved on the pod until the caller binds
// it or ClaimTTL passes. A follower whose deploy was lost (its leader died or lost its
// lease, or its register kept missing Redis) starts again while its wait has time
// left: it takes a warm pod, follows another deploy or leads one of its own where
// max_pods leaves room.
// Errors: SCOPE_NOT_FOUND, NO_POD_AVAILABLE (max_pods reached, room full, follower
// timeout, a deploy lost), DEPLOY_FAILED (the deploy itself failed, or the scope's
// refill backoff holds back the deploy it would lead: at once, with retry_after),
// STORE_UNAVAILABLE.
func (m *Manager) Acquire(ctx context.Context, scope string) (warmpool.Lease, error) {
	l, err := m.acquire(ctx, scope)
	var lost *deployLost
	if errors.As(err, &lost) {
		until := lost.until
		for tries := 1; tries < lostTries && ctx.Err() == nil && m.clock.Now().Before(until); tries++ {
			m.log.InfoContext(ctx, "the deploy this request followed was lost; acquiring again", "scope", scope, "reason", lost.reason)
			if l, err = m.acquire(ctx, scope); !errors.As(err, &lost) {
				break
			}
		}
		switch {
		case !errors.As(err, &lost):
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			err = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: the deploy this request waited for was lost (%s) and no other took it in time; retry", scope, lost.reason).Retry(1)
		}
	}
	if err != nil && !errors.Is(err, warmpool.ErrPoolFull) {
		m.cfg.Observe("acquire", "failed")
	}
	return l, err
}

// deployLost is a follower's answer when the deploy it followed was lost before its pod
// was committed: another try may succeed.
type deployLost struct {
	reason string
	// until is the end of the follower's wait: it tries again only before then.
	until time.Time
}

func (e *deployLost) Error() string { return "the deploy followed was lost: " + e.reason }

// acquire is one try of Acquire.
func (m *Manager) acquire(ctx context.Context, scope string) (warmpool.Lease, error) {
	asked := time.Now()
	now := m.clock.Now()
	claim := warmpool.NewID()
	res, err := m.store.PodAcquire(ctx, scope, redisstore.AcquireArgs{
		Now:           now,
		Claim:         claim,
		ClaimDeadline: now.Add(m.cfg.ClaimTTL),
		LeaseDeadline: now.Add(m.cfg.Lease),
		RoomMargin:    m.cfg.FollowerMargin,
	})
	if err != nil {
		return warmpool.Lease{}, fmt.Errorf("acquire %q: %w", scope, err)
	}
	switch res.Kind {
	case redisstore.AcquireWarm:
		m.cfg.Observe("acquire", warmpool.SourceWarm)
		return warmpool.Lease{Pod: res.Pod, Source: warmpool.SourceWarm, Claim: claim}, nil
	case redisstore.AcquireFollower:
		return m.follow(ctx, scope, res, claim)
	case redisstore.AcquireDeploy:
		return m.lead(ctx, scope, res, claim, time.Since(asked))
	case redisstore.AcquireBackoff:
		m.cfg.Observe("acquire", "backoff")
		return warmpool.Lease{}, m.backoffError(ctx, scope, res, now)
	default:
		m.cfg.Observe("acquire", "max_reached")
		return warmpool.Lease{}, fmt.Errorf("%w: %w", warmpool.ErrPoolFull, warmpool.Errorf(warmpool.CodeNoPodAvailable,
			"scope %q is at max_pods (%d pods, %d deploying) and no deploy in flight has room", scope, res.Pods, res.Deploys).Retry(m.retryAfter(ctx, scope, res.Deploys)))
	}
}

// retryAfter is the Retry-After of a scope at max_pods: with deploys in flight, the
// seconds until the soonest one is expected to be ready, rounded up, at least 1;
// otherwise (or without an estimate yet) 1.
func (m *Manager) retryAfter(ctx context.Context, scope string, deploys int) int {
	if deploys == 0 {
		return 1
	}
	eta, ok, err := m.store.DeployETA(ctx, scope, m.clock.Now())
	if err != nil {
		m.log.DebugContext(ctx, "deploy estimate not read; Retry-After 1", "scope", scope, "err", err)
	}
	if !ok {
		return 1
	}
	return max(1, int((eta+time.Second-1)/time.Second))
}

// backoffError is the 502 of a deploy the scope's refill backoff holds back (SPEC
// §11.3): the last failure's reason, and retry_after the time left of the backoff, or,
// once it has ended and one deploy tries again, that deploy's expected time.
func (m *Manager) backoffError(ctx context.Context, scope string, res redisstore.AcquireResult, now time.Time) error {
	b := res.Backoff
	var retry int
	if left := b.Until.Sub(now); left > 0 {
		retry = int((left + time.Second - 1) / time.Second)
	} else {
		retry = m.retryAfter(ctx, scope, res.Deploys)
	}
	return warmpool.Errorf(warmpool.CodeDeployFailed, "scope %q backs off after %d failed deploys in a row; the last: %s",
		scope, b.Failures, b.LastError).Retry(retry)
}

// lead runs the deploy the caller leads. The deploy is detached from the caller's
// context: its followers wait on it. When the caller leaves first, the slot claimed
// for it on the new pod goes back as soon as the pod is registered (the pod idles
// when nobody else holds it), not when the claim expires.
func (m *Manager) lead(ctx context.Context, scope string, res redisstore.AcquireResult, claim string, leaseWait time.Duration) (warmpool.Lease, error) {
	type result struct {
		pod warmpool.Pod
		err error
	}
	// done is unbuffered: the result is either handed to the caller or, once left
	// is closed, nobody's, and the claim goes back.
	done, left := make(chan result), make(chan struct{})
	started := m.goDeploy(func() {
		pod, err := m.deploy(ctx, scope, res.Deploy, res.Fence, res.Spec, res.ReportIntervalS, claim, leaseWait)
		select {
		case done <- result{pod, err}:
		case <-left:
			if err == nil {
				m.releaseAbandoned(scope, claim)
			}
		}
	})
	if !started {
		m.abandon(scope, res.Deploy, res.Spec)
		return warmpool.Lease{}, errClosing(scope)
	}
	select {
	case r := <-done:
		if r.err != nil {
			return warmpool.Lease{}, r.err
		}
		m.cfg.Observe("acquire", warmpool.SourceDeployed)
		return warmpool.Lease{Pod: r.pod, Source: warmpool.SourceDeployed, Claim: claim}, nil
	case <-ctx.Done():
		close(left)
		return warmpool.Lease{}, ctx.Err()
	}
}

// releaseAbandoned gives back the claim of a caller that left; a claim not given back
// expires by its deadline.
func (m *Manager) releaseAbandoned(scope, claim string) {
	ctx, cancel := redisstore.CleanupContext(m.ctx)
	defer cancel()
	if _, _, err := m.store.ClaimRelease(ctx, scope, claim, m.clock.Now()); err != nil {
		m.log.WarnContext(ctx, "claim of a caller that left not given back; it expires by its deadline", "scope", scope, "err", err)
	}
}

// follow waits, as a follower, for the pod of a deploy in flight. The slot on it is the
// follower's (claimed by the register script). A deploy that failed fails the follower;
// one that was lost answers deployLost, and Acquire tries again. A Redis that does not
// answer for a while does not end the wait before the leader would give up through the
// same silence (half the lease): the leader may still register its pod after it.
// Whatever ends the wait other than the pod, the follower leaves the room and gives
// back any claim it got. A follower its pod had no slot left for (pod_concurrency
// was lowered while it deployed) is told so as for a lost deploy, and Acquire tries
// again under the new limits.
func (m *Manager) follow(ctx context.Context, scope string, res redisstore.AcquireResult, claim string) (lease warmpool.Lease, err error) {
	wait := res.RoomDeadline.Sub(m.clock.Now())
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	defer func() {
		if err == nil {
			return
		}
		cleanup, done := redisstore.CleanupContext(ctx)
		defer done()
		if lerr := m.store.FollowerLeave(cleanup, scope, res.Room, claim, m.clock.Now()); lerr != nil {
			m.log.WarnContext(ctx, "follower could not leave its room; its entry expires by its deadline", "scope", scope, "err", lerr)
		}
	}()
	// Subscribed before the first check: a register after it wakes this follower.
	woken, unsubscribe := m.wake.Subscribe(wctx, scope, redisstore.DeployWaiter(res.Deploy))
	defer unsubscribe()
	t := time.NewTicker(m.cfg.FollowerCheck)
	defer t.Stop()
	answered := time.Now()
	for {
		st, err := m.store.FollowerWait(wctx, scope, res.Deploy, res.Room, claim, m.clock.Now())
		switch {
		case err != nil && wctx.Err() == nil:
			if !stalled(err) || time.Since(answered) >= m.cfg.Lease/2 {
				return warmpool.Lease{}, fmt.Errorf("follow deploy of %q: %w", scope, err)
			}
		case err != nil:
		case st.State == redisstore.FollowerReady:
			m.cfg.Observe("acquire", warmpool.SourceFollower)
			return warmpool.Lease{Pod: st.Pod, Source: warmpool.SourceFollower, Claim: claim}, nil
		case st.State == redisstore.FollowerFailed:
			return warmpool.Lease{}, warmpool.Errorf(warmpool.CodeDeployFailed, "the deploy this request waited for failed: %s", st.Reason)
		case st.State == redisstore.FollowerLost:
			return warmpool.Lease{}, &deployLost{reason: st.Reason, until: res.RoomDeadline}
		case st.State == redisstore.FollowerRetry:
			return warmpool.Lease{}, &deployLost{reason: "its pod had no slot left: pod_concurrency was lowered", until: res.RoomDeadline}
		default:
			answered = time.Now()
		}
		select {
		case <-woken:
		case <-t.C:
		case <-wctx.Done():
			if ctx.Err() != nil {
				return warmpool.Lease{}, ctx.Err()
			}
			return warmpool.Lease{}, warmpool.Errorf(warmpool.CodeNoPodAvailable,
				"scope %q: the deploy in flight did not finish within %s", scope, wait.Round(time.Millisecond)).Retry(1)
		}
	}
}

// Fill starts warm-pool deploys while the scope has fewer idle pods of its current
// version than min_idle_pods (counting warm deploys in flight), within max_pods, the
// parallel-deploy bound and the refill backoff. It returns how many it started; they
// run in the background.
func (m *Manager) Fill(ctx context.Context, scope string) (int, error) {
	started := 0
	for {
		asked := time.Now()
		now := m.clock.Now()
		res, err := m.store.PodPlaceholder(ctx, scope, now, now.Add(m.cfg.Lease), now.Add(m.cfg.ClaimTTL))
		if err != nil {
			return started, fmt.Errorf("fill %q: %w", scope, err)
		}
		if res.Kind != redisstore.PlaceholderDeploy {
			return started, nil
		}
		leaseWait := time.Since(asked)
		if !m.goDeploy(func() {
			// A failure is logged by deploy and retried on the next fill.
			_, _ = m.deploy(ctx, scope, res.Deploy, res.Fence, res.Spec, res.ReportIntervalS, "", leaseWait)
		}) {
			m.abandon(scope, res.Deploy, res.Spec)
			return started, errClosing(scope)
		}
		started++
	}
}

// ReleaseClaim gives back a claim the caller will not bind: its slot goes to the
// oldest waiter of the scope, or is freed (a pod left with no slot goes idle).
func (m *Manager) ReleaseClaim(ctx context.Context, scope, claim string) error {
	if claim == "" {
		return nil
	}
	_, _, err := m.store.ClaimRelease(ctx, scope, claim, m.clock.Now())
	return err
}

// Purge forgets a pod (dead or reclaimed): every key of it, its sessions and its
// claims. It returns the sessions it released. The pod itself is not deleted.
func (m *Manager) Purge(ctx context.Context, scope, pod, reason string) ([]string, error) {
	return m.store.PodPurge(ctx, scope, pod, reason, nil)
}

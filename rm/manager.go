// Package rm is the resource manager: it hands out pods of a scope (a warm one, a place
// on a deploy in flight, or a new deploy under a lease), to the session manager as
// claims and to API callers as holds, takes them back, and forgets dead ones. Every
// state change is one Lua script (package lua).
package rm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/lua"
)

// Defaults of Config.
const (
	DefaultLease          = 30 * time.Second
	DefaultClaimTTL       = 30 * time.Second
	DefaultFollowerMargin = 10 * time.Second
	DefaultPollInterval   = 50 * time.Millisecond
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
	// PollInterval is how often a follower checks on its deploy.
	PollInterval time.Duration
	// IdemTTL is how long a hold is kept for replays of its request id.
	IdemTTL time.Duration
	Clock   warmpool.Clock
	Logger  *slog.Logger
	// Observe, when set, is told the outcome of every acquire (warm, deployed,
	// follower, max_reached, failed) and of every deploy.
	Observe func(event, outcome string)
	// OnDeploy, when set, is told of every deploy when it ends. It must not block.
	OnDeploy func(DeployReport)
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
	store  *lua.Store
	driver warmpool.PodDriver
	cfg    Config
	clock  warmpool.Clock
	log    *slog.Logger

	// ctx bounds the deploys, which run detached from the requests that started them;
	// Close cancels it and waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// fill gives every field left out its default.
func (c *Config) fill() {
	defaults.Positive(&c.Lease, DefaultLease)
	defaults.Positive(&c.ClaimTTL, DefaultClaimTTL)
	defaults.Positive(&c.FollowerMargin, DefaultFollowerMargin)
	defaults.Positive(&c.PollInterval, DefaultPollInterval)
	defaults.Positive(&c.IdemTTL, DefaultIdemTTL)
	c.Clock, c.Logger, c.Observe = defaults.Clock(c.Clock), defaults.Logger(c.Logger), defaults.Observer(c.Observe)
	if c.OnDeploy == nil {
		c.OnDeploy = func(DeployReport) {}
	}
}

// New returns a Manager over store and driver.
func New(store *lua.Store, driver warmpool.PodDriver, cfg Config) *Manager {
	cfg.fill()
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		store: store, driver: driver, cfg: cfg, clock: cfg.Clock,
		log: cfg.Logger.With("component", "rm"), ctx: ctx, cancel: cancel,
	}
}

// Close cancels the deploys in flight and waits until they have cleaned up.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
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
// timeout, a deploy lost), DEPLOY_FAILED (the deploy itself failed), STORE_UNAVAILABLE.
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
	res, err := m.store.PodAcquire(ctx, scope, lua.AcquireArgs{
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
	case lua.AcquireWarm:
		m.cfg.Observe("acquire", warmpool.SourceWarm)
		return warmpool.Lease{Pod: res.Pod, Source: warmpool.SourceWarm, Claim: claim}, nil
	case lua.AcquireFollower:
		return m.follow(ctx, scope, res, claim)
	case lua.AcquireDeploy:
		return m.lead(ctx, scope, res, claim, time.Since(asked))
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

// lead runs the deploy the caller leads. The deploy is detached from the caller's
// context: its followers wait on it. When the caller leaves first, the slot claimed
// for it on the new pod goes back as soon as the pod is registered (the pod idles
// when nobody else holds it), not when the claim expires.
func (m *Manager) lead(ctx context.Context, scope string, res lua.AcquireResult, claim string, leaseWait time.Duration) (warmpool.Lease, error) {
	type result struct {
		pod warmpool.Pod
		err error
	}
	// done is unbuffered: the result is either handed to the caller or, once left
	// is closed, nobody's, and the claim goes back.
	done, left := make(chan result), make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		pod, err := m.deploy(ctx, scope, res.Deploy, res.Fence, res.Spec, claim, leaseWait)
		select {
		case done <- result{pod, err}:
		case <-left:
			if err == nil {
				m.releaseAbandoned(scope, claim)
			}
		}
	}()
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
	ctx, cancel := lua.CleanupContext(m.ctx)
	defer cancel()
	if _, _, err := m.store.ClaimRelease(ctx, scope, claim, m.clock.Now()); err != nil {
		m.log.WarnContext(ctx, "claim of a caller that left not given back; it expires by its deadline", "scope", scope, "err", err)
	}
}

// errLeaseLost: the deploy's lease was lost before its pod was committed.
var errLeaseLost = errors.New("deploy lease lost")

// deploy creates the pod of one deploy lease and registers it, keeping the lease alive
// while the driver works and the register runs. Whatever fails, the lease is given up
// and its followers are told why; a pod not committed is deleted. A deploy that failed
// (the driver's error: the image, the timeout, the pod died) answers DEPLOY_FAILED and
// fails its followers. One that was lost (its lease lost, its ready pod's register
// kept missing Redis, the replica closing) answers 503 with Retry-After and sends its
// followers to try again. The deploy runs detached from from, the context of the call
// that started it, but keeps its values (the request id of its log lines). It logs one
// line with the deploy's phases and reports it to OnDeploy.
func (m *Manager) deploy(from context.Context, scope, member string, fence int64, spec warmpool.DeploySpec, leaderClaim string, leaseWait time.Duration) (warmpool.Pod, error) {
	timeout := time.Duration(spec.ReadyTimeoutS)*time.Second + m.cfg.FollowerMargin
	base, detach := context.WithCancel(context.WithoutCancel(from))
	defer detach()
	defer context.AfterFunc(m.ctx, detach)()
	ctx, cancel := context.WithTimeoutCause(base, timeout, fmt.Errorf("not ready after %ds", spec.ReadyTimeoutS))
	defer cancel()
	log := m.log.With("scope", scope, "deploy", member)

	// The driver and the register work under the lease: losing it cancels them.
	leased, stop := m.store.DeployKeepAlive(ctx, scope, member, m.cfg.Lease, m.clock)
	start := time.Now()
	phases := &phaseLog{start: start, times: []PhaseTime{{Phase: warmpool.PhaseLeaseWait, Elapsed: leaseWait}}}
	pod, err := m.driver.Deploy(leased, warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: fence, Spec: spec, OnPhase: phases.add})
	ready := err == nil
	if ready {
		err = m.register(leased, log, scope, member, pod, leaderClaim)
	}
	lerr := stop()
	cleanup, done := lua.CleanupContext(ctx)
	defer done()
	if ready && err != nil && !errors.Is(err, lua.ErrFenced) {
		// A try whose answer never came may have committed the pod after all.
		if known, kerr := m.store.PodKnown(cleanup, scope, pod.ID); kerr == nil && known {
			log.InfoContext(ctx, "the register's answer was lost, but it committed the pod", "pod", pod.ID, "err", err)
			err = nil
		}
	}
	switch {
	case err == nil:
		// The register took the lease out, so a keep-alive try after it finds the lease
		// gone: that is the commit, not a loss.
		m.cfg.Observe("deploy", "ok")
		m.report(ctx, log, scope, DeployOK, phases, slog.String("pod", pod.ID))
		return pod, nil
	case lerr != nil:
		// Whatever the driver or the register said is a consequence: the deploy was
		// cancelled because its lease may be someone else's now.
		log.WarnContext(ctx, "deploy lease lost; the deploy was cancelled", "err", lerr)
		err = errLeaseLost
	case errors.Is(err, lua.ErrFenced):
		err = errLeaseLost
	}
	if pod.ID != "" {
		if derr := m.driver.Delete(cleanup, pod); derr != nil {
			log.WarnContext(ctx, "delete of an uncommitted pod failed; reconcile will remove it", "pod", pod.ID, "err", derr)
		}
	}
	reason := deployReason(ctx, err)
	// Nothing after the driver's success is the deploy's fault.
	lost := ready || errors.Is(err, errLeaseLost) || m.ctx.Err() != nil
	if _, aerr := m.store.DeployAbort(cleanup, scope, member, reason, lost, m.clock.Now().Add(m.cfg.ClaimTTL)); aerr != nil {
		log.WarnContext(ctx, "abort of a failed deploy failed; its lease expires by itself", "err", aerr)
	}
	m.cfg.Observe("deploy", "failed")
	m.report(ctx, log, scope, DeployFailed, phases, slog.String("err", reason))
	if !lost {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "deploy of scope %q failed: %s", scope, reason)
	}
	code := warmpool.CodeNoPodAvailable
	if warmpool.ErrorCode(err) == warmpool.CodeStoreUnavailable {
		code = warmpool.CodeStoreUnavailable
	}
	return warmpool.Pod{}, warmpool.Errorf(code, "deploy of scope %q was lost before its pod was committed: %s; retry", scope, reason).Retry(1)
}

// register commits a ready pod under its lease. A try that Redis does not answer in
// time (a stall, or a call it ran after its deadline and so refused) is made again
// while the lease is held: the keep-alive cancels leased once Redis has been silent
// from half the lease on, before the lease can run out. The script's own answers
// (FENCED, EPOCH_LOST) are final.
func (m *Manager) register(leased context.Context, log *slog.Logger, scope, member string, pod warmpool.Pod, leaderClaim string) error {
	for tries := 1; ; tries++ {
		now := m.clock.Now()
		_, err := m.store.PodRegister(leased, scope, member, pod, leaderClaim, now, now.Add(m.cfg.ClaimTTL))
		if err == nil || !stalled(err) {
			return err
		}
		if tries == 1 {
			log.InfoContext(leased, "register of a ready pod missed Redis; trying again while the lease holds", "pod", pod.ID, "err", err)
		}
		select {
		case <-leased.Done():
			return err
		case <-time.After(m.cfg.PollInterval):
		}
	}
}

// stalled tells a Redis that did not answer in time (or ran the call too late to
// count) from an answer: another try may get through.
func stalled(err error) bool {
	return warmpool.ErrorCode(err) == warmpool.CodeStoreUnavailable && !errors.Is(err, warmpool.ErrEpochLost)
}

// report logs the one line of a finished deploy, with its phases, tells OnDeploy and
// adds the deploy to the scope's deploy log (the pool page's chart).
func (m *Manager) report(ctx context.Context, log *slog.Logger, scope, result string, phases *phaseLog, attr slog.Attr) {
	r := DeployReport{Scope: scope, Result: result, Took: time.Since(phases.start), Phases: phases.all()}
	attrs := make([]any, 0, len(r.Phases))
	for _, p := range r.Phases {
		attrs = append(attrs, slog.Duration(p.Phase, p.Elapsed))
	}
	level := slog.LevelInfo
	if result != DeployOK {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "deploy", "result", result, "took", r.Took, attr, slog.Group("phases", attrs...))
	m.cfg.OnDeploy(r)
	logCtx, cancel := lua.CleanupContext(m.ctx)
	defer cancel()
	if err := m.store.LogDeploy(logCtx, scope, lua.DeployRecord{At: m.clock.Now(), Took: r.Took, Result: result}); err != nil {
		log.DebugContext(ctx, "deploy not added to the scope's deploy log", "err", err)
	}
}

// phaseLog collects the phases a driver reports while it deploys; drivers may report
// from goroutines of their own.
type phaseLog struct {
	start time.Time
	mu    sync.Mutex
	times []PhaseTime
}

func (p *phaseLog) add(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.times = append(p.times, PhaseTime{Phase: phase, Elapsed: time.Since(p.start)})
}

func (p *phaseLog) all() []PhaseTime {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.times)
}

// deployReason says why a deploy failed, preferring the driver's own message.
func deployReason(ctx context.Context, err error) string {
	var e *warmpool.Error
	switch {
	case errors.As(err, &e):
		return e.Message
	case errors.Is(err, errLeaseLost):
		return "the deploy lease was lost (its leader stalled, or Redis was unreachable or too slow)"
	case ctx.Err() != nil && context.Cause(ctx) != nil:
		return context.Cause(ctx).Error()
	}
	return err.Error()
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
func (m *Manager) follow(ctx context.Context, scope string, res lua.AcquireResult, claim string) (lease warmpool.Lease, err error) {
	wait := res.RoomDeadline.Sub(m.clock.Now())
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	defer func() {
		if err == nil {
			return
		}
		cleanup, done := lua.CleanupContext(ctx)
		defer done()
		if lerr := m.store.FollowerLeave(cleanup, scope, res.Room, claim, m.clock.Now()); lerr != nil {
			m.log.WarnContext(ctx, "follower could not leave its room; its entry expires by its deadline", "scope", scope, "err", lerr)
		}
	}()
	t := time.NewTicker(m.cfg.PollInterval)
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
		case st.State == lua.FollowerReady:
			m.cfg.Observe("acquire", warmpool.SourceFollower)
			return warmpool.Lease{Pod: st.Pod, Source: warmpool.SourceFollower, Claim: claim}, nil
		case st.State == lua.FollowerFailed:
			return warmpool.Lease{}, warmpool.Errorf(warmpool.CodeDeployFailed, "the deploy this request waited for failed: %s", st.Reason)
		case st.State == lua.FollowerLost:
			return warmpool.Lease{}, &deployLost{reason: st.Reason, until: res.RoomDeadline}
		case st.State == lua.FollowerRetry:
			return warmpool.Lease{}, &deployLost{reason: "its pod had no slot left: pod_concurrency was lowered", until: res.RoomDeadline}
		default:
			answered = time.Now()
		}
		select {
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
// version than min_idle_pods (counting warm deploys in flight), within max_pods and the
// parallel-deploy bound. It returns how many it started; they run in the background.
func (m *Manager) Fill(ctx context.Context, scope string) (int, error) {
	started := 0
	for {
		asked := time.Now()
		now := m.clock.Now()
		res, err := m.store.PodPlaceholder(ctx, scope, now, now.Add(m.cfg.Lease), now.Add(m.cfg.ClaimTTL))
		if err != nil {
			return started, fmt.Errorf("fill %q: %w", scope, err)
		}
		if res.Kind != lua.PlaceholderDeploy {
			return started, nil
		}
		started++
		leaseWait := time.Since(asked)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			// A failure is logged by deploy and retried on the next fill.
			_, _ = m.deploy(ctx, scope, res.Deploy, res.Fence, res.Spec, "", leaseWait)
		}()
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

// Hold is a pod handed out to an API caller: one slot of the pod is the caller's until
// it releases the hold or Until passes (pool.hold_ttl_s after the acquire or the last
// touch); then the slot goes to a waiter, or the pod back to the warm pool.
type Hold struct {
	Pod    warmpool.Pod `json:"pod"`
	Source string       `json:"source"`
	ID     string       `json:"hold_id"`
	Until  time.Time    `json:"hold_until"`
}

// Hold acquires a pod as Acquire does and keeps the claimed slot as a hold. With a
// request id, a repeated call returns the first answer: the same hold; a request id
// used for a route is refused. Errors: as Acquire's, IDEMPOTENCY_MISMATCH.
func (m *Manager) Hold(ctx context.Context, scope, requestID string) (Hold, error) {
	if requestID == "" {
		return m.hold(ctx, scope)
	}
	// A repeat waits for the first call's answer at most as long as any deploy may
	// take; the pending mark expires with IdemTTL anyway.
	wait := time.Duration(warmpool.MaxReadyTimeoutS)*time.Second + m.cfg.FollowerMargin
	req := lua.IdemRequest{Scope: scope, ID: requestID, Fingerprint: lua.AcquireFingerprint}
	res, err := m.store.Idempotent(ctx, req, m.cfg.IdemTTL, wait, m.cfg.PollInterval, func() ([]byte, error) {
		h, err := m.hold(ctx, scope)
		if err != nil {
			return nil, err
		}
		return json.Marshal(h)
	})
	if res.Unkept != nil {
		m.log.WarnContext(ctx, "acquire's request id mark not completed", "scope", scope, "err", res.Unkept)
	}
	if err != nil {
		return Hold{}, err
	}
	var h Hold
	if err := json.Unmarshal(res.Answer, &h); err != nil {
		return Hold{}, fmt.Errorf("acquire %q: cached answer: %w", scope, err)
	}
	return h, nil
}

func (m *Manager) hold(ctx context.Context, scope string) (Hold, error) {
	l, err := m.Acquire(ctx, scope)
	if err != nil {
		return Hold{}, err
	}
	until, err := m.store.HoldTouch(ctx, scope, l.Claim, l.Pod.ID, m.clock.Now())
	if err != nil {
		cleanup, cancel := lua.CleanupContext(ctx)
		defer cancel()
		if rerr := m.ReleaseClaim(cleanup, scope, l.Claim); rerr != nil {
			m.log.WarnContext(ctx, "claim not given back; it expires by its deadline", "scope", scope, "err", rerr)
		}
		if errors.Is(err, lua.ErrNoHold) {
			// The pod went away between the two steps.
			err = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: the pod handed out went away; retry", scope).Retry(1)
		}
		return Hold{}, fmt.Errorf("acquire %q: %w", scope, err)
	}
	return Hold{Pod: l.Pod, Source: l.Source, ID: l.Claim, Until: until.UTC()}, nil
}

// TouchHold extends a live hold on pod to pool.hold_ttl_s from now and returns its new
// deadline. Errors: HOLD_NOT_FOUND (unknown, released, expired, or of another pod),
// SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) TouchHold(ctx context.Context, scope, pod, hold string) (time.Time, error) {
	return m.store.HoldTouch(ctx, scope, hold, pod, m.clock.Now())
}

// ReleaseHold releases a live hold on pod: its slot goes to the oldest waiter of the
// scope, or is freed (the pod goes idle when it was its last slot). It reports whether
// the pod is idle now. Errors: HOLD_NOT_FOUND, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) ReleaseHold(ctx context.Context, scope, pod, hold string) (bool, error) {
	return m.store.HoldRelease(ctx, scope, hold, pod, m.clock.Now())
}

// Purge forgets a pod (dead or reclaimed): every key of it, its sessions and its
// claims. It returns the sessions it released. The pod itself is not deleted.
func (m *Manager) Purge(ctx context.Context, scope, pod, reason string) ([]string, error) {
	return m.store.PodPurge(ctx, scope, pod, reason, nil)
}

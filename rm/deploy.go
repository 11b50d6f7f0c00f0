package rm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

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
func (m *Manager) deploy(from context.Context, scope, member string, fence int64, spec warmpool.DeploySpec, reportIntervalS int, leaderClaim string, leaseWait time.Duration) (warmpool.Pod, error) {
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
	pod, err := m.driver.Deploy(leased, warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: fence, Spec: spec, OnPhase: phases.add,
		Report: m.cfg.Report, ReportIntervalS: reportIntervalS})
	ready := err == nil
	if ready {
		err = m.register(leased, log, scope, member, pod, leaderClaim)
	}
	lerr := stop()
	cleanup, done := redisstore.CleanupContext(ctx)
	defer done()
	if ready && err != nil && !errors.Is(err, redisstore.ErrFenced) {
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
	case errors.Is(err, redisstore.ErrFenced):
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
	if _, aerr := m.store.DeployAbort(cleanup, scope, member, spec.DeployVer(), reason, lost, m.clock.Now(), m.clock.Now().Add(m.cfg.ClaimTTL)); aerr != nil {
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
	logCtx, cancel := redisstore.CleanupContext(m.ctx)
	defer cancel()
	if err := m.store.LogDeploy(logCtx, scope, redisstore.DeployRecord{At: m.clock.Now(), Took: r.Took, Result: result}); err != nil {
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

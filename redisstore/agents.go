package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// DrainingVer is what the pool records as the deploy_ver of a pod whose agent reported
// "draining" (PodState.Draining): never a scope's deploy_ver, so the pod is never
// handed out again, and it goes once it has no session (lib/config.lua's DRAINING).
const DrainingVer = "draining"

// AgentReport is one report of a pod's agent (SPEC §11.2).
type AgentReport struct {
	Scope, Pod string
	// Sessions are the sessions the agent serves.
	Sessions []string
	// Proven are the sessions whose session_ticket the report sent and the caller
	// found valid (SPEC §12.4): only they may be bound to the pod again after a data
	// loss. A listed session not among them is touched when it is bound to the pod, and
	// answered unknown otherwise.
	Proven   []string
	Draining bool
	Now      time.Time
}

// AgentAnswer is agent_report.lua's answer.
type AgentAnswer struct {
	// Interval is the scope's report interval.
	Interval time.Duration
	// Unknown are the listed sessions the pool does not bind to the pod: ended,
	// expired, bound elsewhere, or, after a rebuild, without a valid ticket or beyond
	// the pod's adopted slots.
	Unknown []string
	// Ended counts the sessions the reports left out twice in a row, ended by this
	// one (sessions_from_reports).
	Ended int
	// Most is the most sessions a report of the pod may list now (what ReportCap
	// reads), so that the next report's body is bounded without asking again.
	Most int
	// SparedUntil is set when the report moved the time until which the pod is not
	// probed (and the shard's Reported index was written).
	SparedUntil time.Time
}

// ErrPodUnknown: the pod of a report is not in its scope's pool (never registered,
// or purged).
var ErrPodUnknown = warmpool.Errorf(warmpool.CodePodNotFound, "the pod is not in its scope's pool: it was purged or never registered; the agent should exit")

// ReportCap runs report_cap.lua: the most sessions a report of pod may list, as
// agent_report.lua holds it to (the scope's pod_concurrency, or the pod's slots when a
// lowered pod_concurrency left it more), so that the HTTP layer bounds a report's body
// before it reads it. Errors: POD_NOT_FOUND (a scope Redis does not have), EPOCH_LOST,
// STORE_UNAVAILABLE.
func (s *Store) ReportCap(ctx context.Context, scope, pod string) (int, error) {
	r, err := s.call(ctx, reportCap, s.keys.Scope(scope), nil, pod)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return 0, ErrPodUnknown
	}
	if err != nil {
		return 0, err
	}
	r.oneOf(0, "ok")
	most := r.count(1)
	return most, r.err()
}

// AgentReport runs agent_report.lua: liveness, activity, the rebuild's bindings,
// ground truth and draining of one report, in one script; then, every other report,
// it moves the pod in its shard's Reported index. A scope governed in sessions binds
// the sessions a rebuild gives back whatever the quota, but takes them from its
// tenant's escrow first (the script answers how many it needs, and runs again), and
// gives back what it took and did not bind, as PodAdopt does with pods. Errors:
// VALIDATION (more sessions than the pod may hold: TooManySessions), POD_NOT_FOUND
// (also for a scope Redis does not have), NO_POD_AVAILABLE (other calls kept taking
// the escrowed sessions: the next report binds them), EPOCH_LOST, STORE_UNAVAILABLE.
func (s *Store) AgentReport(ctx context.Context, rep AgentReport) (AgentAnswer, error) {
	var took int64
	var tenant string
	for try := 1; ; try++ {
		a, ask, err := s.agentReport(ctx, rep, took)
		if err == nil && ask.n > 0 {
			if try == quotaTries {
				err = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: the sessions its tenant's escrow gave the report were taken by other calls %d times in a row; retry", rep.Scope, quotaTries).Retry(1)
			} else if _, err = s.tenantGrant(ctx, ask.tenant, rep.Scope, "sessions", ask.n, 0, 0, true, false); err == nil {
				took, tenant = took+ask.n, ask.tenant
				continue
			}
		}
		// what the run left unused of what was taken; all of it unless it answered ok
		unused := took
		if err == nil {
			unused = a.escrowed
		}
		if unused > 0 {
			cleanup, cancel := CleanupContext(ctx)
			_, cerr := s.tenantCredit(cleanup, tenant, rep.Scope, "sessions", unused, true)
			cancel()
			err = errors.Join(err, cerr)
		}
		if err != nil {
			return AgentAnswer{}, err
		}
		return a.AgentAnswer, nil
	}
}

// reportAnswer is one run of agent_report.lua: the answer, and how many of the took
// escrowed sessions the run left unused.
type reportAnswer struct {
	AgentAnswer
	escrowed int64
}

// sessionAsk is agent_report.lua's "escrow" answer: n sessions more from the tenant's
// escrow (n is 0 for any other answer).
type sessionAsk struct {
	n      int64
	tenant string
}

// agentReport is one run of agent_report.lua with took sessions escrowed for it.
func (s *Store) agentReport(ctx context.Context, rep AgentReport, took int64) (reportAnswer, sessionAsk, error) {
	args := make([]any, 0, 8+len(rep.Proven)+len(rep.Sessions))
	args = append(args, ms(rep.Now), rep.Pod, flag(rep.Draining), int64(warmpool.DefaultReportIntervalS)*1000)
	args = append(args, s.handoffArgs(rep.Now)...)
	args = append(args, took, len(rep.Proven))
	for _, sid := range rep.Proven {
		args = append(args, sid)
	}
	for _, sid := range rep.Sessions {
		args = append(args, sid)
	}
	r, err := s.call(ctx, agentReport, s.keys.Scope(rep.Scope), nil, args...)
	if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
		return reportAnswer{}, sessionAsk{}, ErrPodUnknown
	}
	if err != nil {
		return reportAnswer{}, sessionAsk{}, err
	}
	switch r.oneOf(0, "ok", "unknown_pod", "too_many", "escrow") {
	case "unknown_pod":
		return reportAnswer{}, sessionAsk{}, ErrPodUnknown
	case "too_many":
		if most := r.count(1); r.err() == nil {
			return reportAnswer{}, sessionAsk{}, warmpool.TooManySessions(len(rep.Sessions), most)
		}
	case "escrow":
		ask := sessionAsk{n: int64(r.count(1)), tenant: r.str(2)}
		if err := r.err(); err != nil {
			return reportAnswer{}, sessionAsk{}, err
		}
		return reportAnswer{}, ask, nil
	}
	a := AgentAnswer{Interval: time.Duration(r.int(1)) * time.Millisecond, Ended: r.count(3), Most: r.count(4)}
	spared := r.int(2)
	escrowed := r.int(5)
	n := r.count(6)
	a.Unknown = r.strs(7)
	if r.err() == nil && len(a.Unknown) != n {
		r.fail("%d unknown sessions, want %d", len(a.Unknown), n)
	}
	if err := r.err(); err != nil {
		return reportAnswer{}, sessionAsk{}, err
	}
	if spared > 0 {
		a.SparedUntil = time.UnixMilli(spared)
		// The script has committed: a failed index write only costs probes of a pod
		// that is alive, until its next report that moves the time.
		ref := PodRef{Scope: rep.Scope, Pod: rep.Pod}
		_ = s.rdb.ZAddGT(ctx, s.keys.Reported(DueShard(rep.Scope)), redis.Z{Score: float64(spared), Member: ref.member()}).Err()
	}
	return reportAnswer{AgentAnswer: a, escrowed: escrowed}, sessionAsk{}, nil
}

// Spared returns which of refs, pods of one shard, reported recently enough not to be
// probed at now: their time in the shard's Reported index is ahead of now (ProbeWindow
// drops the entries behind it). One command. Errors: STORE_UNAVAILABLE.
func (s *Store) Spared(ctx context.Context, shard int, refs []PodRef, now time.Time) (map[PodRef]bool, error) {
	spared := map[PodRef]bool{}
	if len(refs) == 0 {
		return spared, nil
	}
	members := make([]string, len(refs))
	for i, r := range refs {
		members[i] = r.member()
	}
	scores, err := s.rdb.ZMScore(ctx, s.keys.Reported(shard), members...).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	t := float64(now.UnixMilli())
	for i, v := range scores {
		if v > t {
			spared[refs[i]] = true
		}
	}
	return spared, nil
}

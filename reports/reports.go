// Package reports takes the reports of agents (SPEC §11.2): each is one script call
// (redisstore.Store.AgentReport) that keeps the pod from being probed, touches its sessions,
// binds them back after Redis lost its data (only those whose session_ticket, SPEC
// §12.4, the report sends and this package checks), ends the sessions the reports
// leave out (sessions_from_reports) and takes a draining pod out of routing. The HTTP
// layer checks the pod's token (httpx.ReportKey) before a report gets here.
package reports

import (
	"context"
	"log/slog"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Config tunes the manager; zero fields take defaults.
type Config struct {
	Clock  warmpool.Clock
	Logger *slog.Logger
	// ValidTicket checks a session_ticket in constant time (httpx.ReportKey.ValidTicket);
	// nil: no ticket is valid, no session is bound again from a report.
	ValidTicket func(scope, session, pod, ticket string) bool
}

// State is what the reports need of the Redis state store (redisstore.Store).
type State interface {
	ReportCap(ctx context.Context, scope, pod string) (int, error)
	AgentReport(ctx context.Context, rep redisstore.AgentReport) (redisstore.AgentAnswer, error)
}

var _ State = (*redisstore.Store)(nil)

// Manager takes the reports.
type Manager struct {
	store State
	caps  capCache
	clock warmpool.Clock
	log   *slog.Logger
	valid func(scope, session, pod, ticket string) bool
}

// New returns the manager of the reports on store.
func New(store State, cfg Config) *Manager {
	valid := cfg.ValidTicket
	if valid == nil {
		valid = func(_, _, _, _ string) bool { return false }
	}
	return &Manager{store: store, clock: defaults.Clock(cfg.Clock), log: defaults.Logger(cfg.Logger).With("component", "reports"), valid: valid}
}

// proven are the sessions of r whose ticket is valid for r's pod: the ones a report
// may bind again after a data loss.
func (m *Manager) proven(r warmpool.AgentReport) []string {
	var out []string
	for s, t := range r.Tickets {
		if m.valid(r.ScopeID, s, r.PodID, t) {
			out = append(out, s)
		}
	}
	return out
}

// Cap is the most sessions a report of pod may list, at most warmpool.MaxPodConcurrency:
// what bounds its body before the body is read. It is the answer to the pod's last
// report here when that came within capAge (cached), else read from Redis
// (redisstore.Store.ReportCap, one round trip: what every report paid before); fresh
// reads Redis and drops what was cached, for a report that a cached cap refused (its
// scope's pod_concurrency may have been raised since). The report's script holds
// it to the cap of the moment all the same. Errors: POD_NOT_FOUND (a scope Redis does
// not have), STORE_UNAVAILABLE.
func (m *Manager) Cap(ctx context.Context, scope, pod string, fresh bool) (most int, cached bool, err error) {
	k := capKey{scope, pod}
	if fresh {
		m.caps.drop(k)
	} else if n, ok := m.caps.get(k, m.clock.Now()); ok {
		return n, true, nil
	}
	n, err := m.store.ReportCap(ctx, scope, pod)
	return min(n, warmpool.MaxPodConcurrency), false, err
}

// Report takes one report whose token was checked. Errors: VALIDATION, POD_NOT_FOUND
// (unknown or purged pod, or a scope Redis does not have: the agent should exit),
// STORE_UNAVAILABLE.
func (m *Manager) Report(ctx context.Context, r warmpool.AgentReport) (warmpool.ReportAnswer, error) {
	if err := r.Check(); err != nil {
		return warmpool.ReportAnswer{}, err
	}
	a, err := m.store.AgentReport(ctx, redisstore.AgentReport{Scope: r.ScopeID, Pod: r.PodID, Sessions: r.Sessions,
		Proven: m.proven(r), Draining: r.State == warmpool.AgentDraining, Now: m.clock.Now()})
	k := capKey{r.ScopeID, r.PodID}
	if err != nil {
		if warmpool.ErrorCode(err) == warmpool.CodePodNotFound {
			m.caps.drop(k)
		}
		return warmpool.ReportAnswer{}, err
	}
	m.caps.put(k, min(a.Most, warmpool.MaxPodConcurrency), m.clock.Now())
	if a.Ended > 0 {
		m.log.Info("sessions ended: two reports in a row left them out", "scope", r.ScopeID, "pod", r.PodID, "ended", a.Ended)
	}
	unknown := a.Unknown
	if unknown == nil {
		unknown = []string{}
	}
	return warmpool.ReportAnswer{NextReportS: max(1, int(a.Interval/time.Second)), UnknownSessions: unknown}, nil
}

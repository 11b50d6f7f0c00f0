// Package reports takes the reports of agents (SPEC §11.2): each is one script call
// (lua.Store.AgentReport) that keeps the pod from being probed, touches its sessions,
// binds them back after Redis lost its data, ends the sessions the reports leave out
// (sessions_from_reports) and takes a draining pod out of routing. The HTTP layer checks
// the pod's token (httpx.ReportKey) before a report gets here.
package reports

import (
	"context"
	"log/slog"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/lua"
)

// MaxSessions bounds the sessions one report may list: no pod holds more. A report of
// a pod lists at most what its scope's pod_concurrency lets it hold (Manager.Cap).
const MaxSessions = warmpool.MaxPodConcurrency

// The bytes a report body is bounded by (BodyLimit): each listed session takes at most
// sessionBytes (its id, the quotes and separator around it and some white space), the
// rest of the body (pod_id, scope_id, state, the keys and braces) at most reportBase.
const (
	sessionBytes = warmpool.MaxSessionIDLen + 16
	reportBase   = 2048
)

// BodyLimit is the most bytes the body of a report listing at most sessions may take;
// never more than every body's httpx.MaxBody.
func BodyLimit(sessions int) int64 {
	return min(int64(reportBase)+int64(sessions)*sessionBytes, httpx.MaxBody)
}

// Report is one agent report, as its body says (POST /v1/agents/report).
type Report struct {
	PodID    string   `json:"pod_id"`
	ScopeID  string   `json:"scope_id"`
	Sessions []string `json:"sessions"`
	// State is warmpool.AgentReady (also when empty) or warmpool.AgentDraining.
	State string `json:"state"`
}

// Check returns a VALIDATION error naming the first bad field of the report.
func (r Report) Check() error {
	if err := warmpool.CheckScopeID(r.ScopeID); err != nil {
		return err
	}
	if !warmpool.ValidPodID(r.PodID) {
		return warmpool.Errorf(warmpool.CodeValidation, "pod_id: must be a pod id (lowercase letters, digits, '.', '-'; 1-253 chars)")
	}
	if len(r.Sessions) > MaxSessions {
		return warmpool.Errorf(warmpool.CodeValidation, "sessions: at most %d", MaxSessions)
	}
	for _, s := range r.Sessions {
		if !warmpool.ValidSessionID(s) {
			return warmpool.Errorf(warmpool.CodeValidation, "sessions: %q is no session id (1-128 chars of [A-Za-z0-9._:-])", s)
		}
	}
	if r.State != "" && r.State != warmpool.AgentReady && r.State != warmpool.AgentDraining {
		return warmpool.Errorf(warmpool.CodeValidation, "state: must be %q or %q, got %q", warmpool.AgentReady, warmpool.AgentDraining, r.State)
	}
	return nil
}

// Answer is what a report is answered.
type Answer struct {
	// NextReportS is when the agent reports next, in seconds (its scope's
	// agent.report_interval_s).
	NextReportS int `json:"next_report_s"`
	// UnknownSessions are the listed sessions the pool does not have on the pod: the
	// agent may close them.
	UnknownSessions []string `json:"unknown_sessions"`
}

// Config tunes the manager; zero fields take defaults.
type Config struct {
	Clock  warmpool.Clock
	Logger *slog.Logger
}

// Manager takes the reports.
type Manager struct {
	store *lua.Store
	clock warmpool.Clock
	log   *slog.Logger
}

// New returns the manager of the reports on store.
func New(store *lua.Store, cfg Config) *Manager {
	return &Manager{store: store, clock: defaults.Clock(cfg.Clock), log: defaults.Logger(cfg.Logger).With("component", "reports")}
}

// Cap is the most sessions a report of pod may list (lua.Store.ReportCap, at most
// MaxSessions): what bounds its body before the body is read. Errors: POD_NOT_FOUND
// (a scope Redis does not have), STORE_UNAVAILABLE.
func (m *Manager) Cap(ctx context.Context, scope, pod string) (int, error) {
	n, err := m.store.ReportCap(ctx, scope, pod)
	return min(n, MaxSessions), err
}

// Report takes one report whose token was checked. Errors: VALIDATION, POD_NOT_FOUND
// (unknown or purged pod, or a scope Redis does not have: the agent should exit),
// STORE_UNAVAILABLE.
func (m *Manager) Report(ctx context.Context, r Report) (Answer, error) {
	if err := r.Check(); err != nil {
		return Answer{}, err
	}
	a, err := m.store.AgentReport(ctx, lua.AgentReport{Scope: r.ScopeID, Pod: r.PodID, Sessions: r.Sessions,
		Draining: r.State == warmpool.AgentDraining, Now: m.clock.Now()})
	if err != nil {
		return Answer{}, err
	}
	if a.Ended > 0 {
		m.log.Info("sessions ended: two reports in a row left them out", "scope", r.ScopeID, "pod", r.PodID, "ended", a.Ended)
	}
	unknown := a.Unknown
	if unknown == nil {
		unknown = []string{}
	}
	return Answer{NextReportS: max(1, int(a.Interval/time.Second)), UnknownSessions: unknown}, nil
}

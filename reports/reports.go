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
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// MaxSessions bounds the sessions one report may list: no pod holds more. A report of
// a pod lists at most what its scope's pod_concurrency lets it hold (Manager.Cap).
const MaxSessions = warmpool.MaxPodConcurrency

// The bytes a report body is bounded by (BodyLimit): each listed session takes at most
// sessionBytes (its id in sessions and as a key of tickets, its ticket, and the
// quotes, separators and some white space around them), the rest of the body
// (pod_id, scope_id, state, the keys and braces) at most reportBase.
const (
	sessionBytes = 2*warmpool.MaxSessionIDLen + httpx.TicketLen + 32
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
	// Tickets are the session_tickets of listed sessions, as their routes answered
	// them (SPEC §12.4): after a Redis data loss, only a session with a valid ticket is
	// bound to the pod again.
	Tickets map[string]string `json:"tickets"`
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
	if len(r.Tickets) > len(r.Sessions) {
		return warmpool.Errorf(warmpool.CodeValidation, "tickets: %d, more than the %d sessions listed", len(r.Tickets), len(r.Sessions))
	}
	if r.State != "" && r.State != warmpool.AgentReady && r.State != warmpool.AgentDraining {
		return warmpool.Errorf(warmpool.CodeValidation, "state: must be %q or %q, got %q", warmpool.AgentReady, warmpool.AgentDraining, r.State)
	}
	return r.checkTickets()
}

// checkTickets returns a VALIDATION error naming the first bad ticket: one of a
// session not listed, or of the wrong length.
func (r Report) checkTickets() error {
	if len(r.Tickets) == 0 {
		return nil
	}
	listed := make(map[string]bool, len(r.Sessions))
	for _, s := range r.Sessions {
		listed[s] = true
	}
	for s, t := range r.Tickets {
		if !listed[s] {
			return warmpool.Errorf(warmpool.CodeValidation, "tickets: %q is not listed in sessions", s)
		}
		if len(t) != httpx.TicketLen {
			return warmpool.Errorf(warmpool.CodeValidation, "tickets.%s: a session_ticket has %d characters, got %d", s, httpx.TicketLen, len(t))
		}
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
func (m *Manager) proven(r Report) []string {
	var out []string
	for s, t := range r.Tickets {
		if m.valid(r.ScopeID, s, r.PodID, t) {
			out = append(out, s)
		}
	}
	return out
}

// Cap is the most sessions a report of pod may list (redisstore.Store.ReportCap, at most
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
	a, err := m.store.AgentReport(ctx, redisstore.AgentReport{Scope: r.ScopeID, Pod: r.PodID, Sessions: r.Sessions,
		Proven: m.proven(r), Draining: r.State == warmpool.AgentDraining, Now: m.clock.Now()})
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

package warmpool

// TooManySessions is the VALIDATION error of a report that lists more sessions than
// its pod may hold (most: its scope's pool.pod_concurrency, or the sessions and holds
// of a pod that has more).
func TooManySessions(listed, most int) error {
	return Errorf(CodeValidation,
		"sessions: %d listed, at most %d: the scope's pool.pod_concurrency (or the sessions and holds of a pod that has more)", listed, most)
}

// SessionTicketLen is the length of a session_ticket (SPEC §12.4): an HMAC-SHA256 in
// unpadded base64url.
const SessionTicketLen = 43

// The bytes a report body is bounded by (ReportBodyLimit): each listed session takes at most
// sessionBytes (its id in sessions and as a key of tickets, its ticket, and the
// quotes, separators and some white space around them), the rest of the body
// (pod_id, scope_id, state, the keys and braces) at most reportBase.
const (
	sessionBytes = 2*MaxSessionIDLen + SessionTicketLen + 32
	reportBase   = 2048
)

// ReportBodyLimit is the most bytes the body of a report listing at most sessions may
// take (the HTTP layer never reads more than any body's limit either).
func ReportBodyLimit(sessions int) int64 {
	return int64(reportBase) + int64(sessions)*sessionBytes
}

// AgentReport is one agent report, as its body says (POST /v1/agents/report).
type AgentReport struct {
	PodID    string   `json:"pod_id"`
	ScopeID  string   `json:"scope_id"`
	Sessions []string `json:"sessions"`
	// Tickets are the session_tickets of listed sessions, as their routes answered
	// them (SPEC §12.4): after a Redis data loss, only a session with a valid ticket is
	// bound to the pod again.
	Tickets map[string]string `json:"tickets"`
	// State is AgentReady (also when empty) or AgentDraining.
	State string `json:"state"`
}

// Check returns a VALIDATION error naming the first bad field of the report.
func (r AgentReport) Check() error {
	if err := CheckScopeID(r.ScopeID); err != nil {
		return err
	}
	if !ValidPodID(r.PodID) {
		return Errorf(CodeValidation, "pod_id: must be a pod id (lowercase letters, digits, '.', '-'; 1-253 chars)")
	}
	if len(r.Sessions) > MaxPodConcurrency {
		return Errorf(CodeValidation, "sessions: at most %d", MaxPodConcurrency)
	}
	for _, s := range r.Sessions {
		if !ValidSessionID(s) {
			return Errorf(CodeValidation, "sessions: %q is no session id (1-128 chars of [A-Za-z0-9._:-])", s)
		}
	}
	if len(r.Tickets) > len(r.Sessions) {
		return Errorf(CodeValidation, "tickets: %d, more than the %d sessions listed", len(r.Tickets), len(r.Sessions))
	}
	if r.State != "" && r.State != AgentReady && r.State != AgentDraining {
		return Errorf(CodeValidation, "state: must be %q or %q, got %q", AgentReady, AgentDraining, r.State)
	}
	return r.checkTickets()
}

// checkTickets returns a VALIDATION error naming the first bad ticket: one of a
// session not listed, or of the wrong length.
func (r AgentReport) checkTickets() error {
	if len(r.Tickets) == 0 {
		return nil
	}
	listed := make(map[string]bool, len(r.Sessions))
	for _, s := range r.Sessions {
		listed[s] = true
	}
	for s, t := range r.Tickets {
		if !listed[s] {
			return Errorf(CodeValidation, "tickets: %q is not listed in sessions", s)
		}
		if len(t) != SessionTicketLen {
			return Errorf(CodeValidation, "tickets.%s: a session_ticket has %d characters, got %d", s, SessionTicketLen, len(t))
		}
	}
	return nil
}

// ReportAnswer is what a report is answered.
type ReportAnswer struct {
	// NextReportS is when the agent reports next, in seconds (its scope's
	// agent.report_interval_s).
	NextReportS int `json:"next_report_s"`
	// UnknownSessions are the listed sessions the pool does not have on the pod: the
	// agent may close them.
	UnknownSessions []string `json:"unknown_sessions"`
}

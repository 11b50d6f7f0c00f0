// Package agent is for the authors of agents that warmpool runs (SPEC §11.2): a
// Reporter tells warmpool, once at start and then every report interval with jitter
// (the scope's agent.report_interval_s, in WARMPOOL_REPORT_INTERVAL_S), which sessions
// the pod serves and whether it drains. warmpool then does not probe the pod, keeps those
// sessions alive, and after losing its data binds them back to the pod: those it can
// prove were routed there.
//
// The proof is the session's session_ticket (SPEC §12.4): warmpool's answer to a
// session route carries it (an HMAC of scope, session and pod under the report
// secret), the gateway passes it to the pod with the session, as the query parameter
// session_ticket of the SSE request next to session_id (SessionParam, TicketParam:
// GET <sse_path>?session_id=S&session_ticket=T), and the agent keeps it while it
// serves the session and sends it back in every report (Config.Tickets, the report's
// "tickets": {session: ticket}). After a Redis data loss, only a session with a valid
// ticket for this pod is bound to it again: another pod's agent cannot take a session
// by naming it first. A session already bound to the pod is kept alive with or without
// one.
//
// A session's own config (SPEC §12.2: the env and resolved secrets its route gave it,
// never in the pod spec) is the agent's to fetch: SessionConfig (or a Reporter's,
// which keeps it while the session is served and drops it once a report's answer
// says the session ended, so a reused pod's next session sees none of it).
//
// It needs only the standard library and warmpool's root package, which needs no
// more; agents in other languages follow the same call, described in warmpool's
// OpenAPI document (POST /v1/agents/report).
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// Defaults of Config.
const (
	DefaultInterval   = 5 * time.Second
	DefaultJitter     = 0.2
	DefaultMaxBackoff = time.Minute
	// DefaultGoneAfter is how long a pod that warmpool never accepted a report of
	// keeps trying: a pod reports before its deploy is registered.
	DefaultGoneAfter = 2 * time.Minute
	reportPath       = "/v1/agents/report"
)

// The query parameters of the SSE request that name the session it serves and carry
// its session_ticket, as the gateway passes them from warmpool's route answer.
const (
	SessionParam = "session_id"
	TicketParam  = "session_ticket"
)

// ErrGone: warmpool answered that the pod is not in its pool (404 POD_NOT_FOUND):
// it was purged, or never registered. The agent should exit.
var ErrGone = errors.New("agent: warmpool does not know this pod (POD_NOT_FOUND): exit")

// Config is what a Reporter needs; FromEnv fills the connection from the environment.
type Config struct {
	// URL is warmpool's address (WARMPOOL_REPORT_URL); the reports go to its
	// /v1/agents/report.
	URL string
	// Token is the pod's own report token (WARMPOOL_REPORT_TOKEN).
	Token        string
	PodID, Scope string
	// Sessions lists the sessions the agent serves now; called before every report.
	Sessions func() []string
	// Tickets are the session_tickets of the sessions the agent serves, as the SSE
	// requests brought them (TicketParam); called before every report, after
	// Sessions, whose sessions alone are sent. Nil, or a session without one: the
	// session is not bound to the pod again after a Redis data loss.
	Tickets func() map[string]string
	// Interval is the wait between reports until warmpool answers its own
	// (next_report_s); the first report goes at once. FromEnv sets it from
	// WARMPOOL_REPORT_INTERVAL_S. Jitter spreads each wait by up to that fraction
	// either way; MaxBackoff bounds the wait after failed reports (doubling from the
	// interval warmpool last answered, Interval before). GoneAfter: see
	// DefaultGoneAfter.
	Interval   time.Duration
	Jitter     float64
	MaxBackoff time.Duration
	GoneAfter  time.Duration
	// Client sends the reports; a client with a 10 s timeout when nil.
	Client *http.Client
	Logger *slog.Logger
}

// FromEnv is the connection warmpool gave the pod, and the scope's report interval
// (WARMPOOL_REPORT_INTERVAL_S; left out, or not a number of seconds: the default): ok
// is false when reports are off (no WARMPOOL_REPORT_URL) or the environment lacks a
// field.
func FromEnv(getenv func(string) string) (cfg Config, ok bool) {
	cfg = Config{URL: getenv(warmpool.EnvReportURL), Token: getenv(warmpool.EnvReportToken),
		PodID: getenv(warmpool.EnvPodID), Scope: getenv(warmpool.EnvScope)}
	if s, err := strconv.Atoi(getenv(warmpool.EnvReportInterval)); err == nil && s > 0 {
		cfg.Interval = time.Duration(s) * time.Second
	}
	return cfg, cfg.URL != "" && cfg.Token != "" && cfg.PodID != "" && cfg.Scope != ""
}

// Reporter reports one pod's sessions and state to warmpool.
type Reporter struct {
	cfg     Config
	log     *slog.Logger
	mu      sync.Mutex
	drain   bool
	unknown []string
	now     chan struct{} // a report due at once (Drain)
	// configs are the session configs fetched (SessionConfig), kept while their
	// sessions are served and dropped with them (forgetLocked).
	configs map[string]map[string]string
}

// New returns a reporter of cfg, its zero fields at their defaults.
func New(cfg Config) *Reporter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Jitter <= 0 || cfg.Jitter >= 1 {
		cfg.Jitter = DefaultJitter
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.GoneAfter <= 0 {
		cfg.GoneAfter = DefaultGoneAfter
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Sessions == nil {
		cfg.Sessions = func() []string { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{cfg: cfg, log: cfg.Logger.With("component", "reporter"), now: make(chan struct{}, 1)}
}

// Drain makes every report from now on say "draining", the next one at once: warmpool
// gives the pod no new session, and deletes it once its sessions have ended. Call it
// on SIGTERM.
func (r *Reporter) Drain() {
	r.mu.Lock()
	r.drain = true
	r.mu.Unlock()
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Unknown are the sessions of the last report that warmpool does not have on the pod
// (ended, expired or bound elsewhere): the agent may close them.
func (r *Reporter) Unknown() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unknown
}

// Run reports at once, then every interval, until ctx ends (nil) or warmpool no longer
// knows the pod (ErrGone: the agent should exit). A failed report is retried with a
// doubling backoff; a pod not registered yet (POD_NOT_FOUND before warmpool ever took a
// report, within GoneAfter) is asked about again at the interval.
func (r *Reporter) Run(ctx context.Context) error {
	// base is the interval warmpool last asked for (Interval until it answers): the
	// backoff doubles from it, so a scope that asked for fast reports gets a fast
	// retry, and one that slowed them no faster retries. The first report goes at once,
	// so a session bound as soon as the pod registers is touched at the first interval
	// after that, not only after the agent's own default.
	wait, base, failures := time.Duration(0), r.cfg.Interval, 0
	var accepted bool
	start := time.Now()
	for {
		t := time.NewTimer(r.jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-r.now:
			t.Stop()
		}
		next, err := r.Report(ctx)
		switch {
		case errors.Is(err, ErrGone) && (accepted || time.Since(start) >= r.cfg.GoneAfter):
			return err
		case errors.Is(err, ErrGone):
			wait = base // the deploy has not registered the pod yet
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = min(r.cfg.MaxBackoff, base<<min(failures, 10))
			r.log.Warn("report failed; retrying", "err", err, "in", wait)
		default:
			accepted, failures, wait, base = true, 0, next, next
		}
	}
}

// jitter spreads d by up to Jitter of it either way.
func (r *Reporter) jitter(d time.Duration) time.Duration {
	f := 1 + r.cfg.Jitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

type body struct {
	PodID    string            `json:"pod_id"`
	ScopeID  string            `json:"scope_id"`
	Sessions []string          `json:"sessions"`
	Tickets  map[string]string `json:"tickets,omitempty"`
	State    string            `json:"state"`
}

// tickets are the tickets of sessions that have one.
func (r *Reporter) tickets(sessions []string) map[string]string {
	if r.cfg.Tickets == nil {
		return nil
	}
	all := r.cfg.Tickets()
	out := make(map[string]string, min(len(all), len(sessions)))
	for _, s := range sessions {
		if t := all[s]; t != "" {
			out[s] = t
		}
	}
	return out
}

type answer struct {
	NextReportS     int      `json:"next_report_s"`
	UnknownSessions []string `json:"unknown_sessions"`
}

// Report sends one report now and returns when the next is due. Errors: ErrGone, and
// any other for a report warmpool did not take (retry it).
func (r *Reporter) Report(ctx context.Context) (time.Duration, error) {
	r.mu.Lock()
	state := warmpool.AgentReady
	if r.drain {
		state = warmpool.AgentDraining
	}
	r.mu.Unlock()
	sessions := r.cfg.Sessions()
	if sessions == nil {
		sessions = []string{}
	}
	raw, err := json.Marshal(body{PodID: r.cfg.PodID, ScopeID: r.cfg.Scope, Sessions: sessions, Tickets: r.tickets(sessions), State: state})
	if err != nil {
		return 0, err
	}
	url := strings.TrimSuffix(r.cfg.URL, "/")
	if !strings.HasSuffix(url, reportPath) {
		url += reportPath
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	var a answer
	if err := r.call(req, "report", warmpool.CodePodNotFound, ErrGone, &a); err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.unknown = a.UnknownSessions
	r.forgetLocked(sessions, a.UnknownSessions)
	r.mu.Unlock()
	return max(time.Second, time.Duration(a.NextReportS)*time.Second), nil
}

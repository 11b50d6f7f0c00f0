// Package ui is the live pool page (GET /ui): one HTML document with its style and
// script inline, embedded with go:embed (no build step, nothing loaded from elsewhere),
// and the data it polls (GET /v1/ui/state, an admin call): the totals over every
// scope and a page of summary rows (state.go) from one pass over every scope that a
// replica makes at most once a Refresh and shares (summary.go), the tenants with
// quotas, their use and share, which a replica reads at most once a Refresh
// (tenants.go), and the pods and deploy logs of the scopes the page shows. The page
// itself is open: it holds no data. When the server has an admin token, a small form
// keeps it in the browser's sessionStorage and the script sends it as a bearer token.
package ui

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/warmpool/warmpool"
)

// Refresh is how often the page polls its data, and the longest a replica keeps the
// summary of every scope (and shares it in Redis) before it reads them again.
const Refresh = time.Second

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Parse(pageHTML))

// UI serves the pool page and its data.
type UI struct {
	store    Pools
	instance string
	clock    warmpool.Clock
	log      *slog.Logger
	sums     *summaries
	tenants  *tenantPanel
}

// New returns the pool page of a replica named instanceID, reading Redis through
// store and the tenants through tenants.
func New(store Pools, tenants Tenants, instanceID string, clock warmpool.Clock, log *slog.Logger) *UI {
	log = log.With("component", "ui")
	return &UI{store: store, instance: instanceID, clock: clock, log: log,
		sums:    &summaries{store: store, clock: clock, instance: instanceID, ttl: Refresh, log: log},
		tenants: newTenantPanel(tenants, clock, Refresh)}
}

// Page serves the HTML page. Each answer carries a Content-Security-Policy that lets
// only its own inline style and script (by a fresh nonce) run, and lets the script
// connect to this server alone.
func (u *UI) Page() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [18]byte
		_, _ = rand.Read(b[:])
		nonce := base64.StdEncoding.EncodeToString(b[:])
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
			"'; connect-src 'self'; img-src data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
		if err := page.Execute(w, map[string]any{"Nonce": nonce, "Instance": u.instance, "RefreshMs": Refresh.Milliseconds()}); err != nil {
			u.log.WarnContext(r.Context(), "pool page not written", "err", err)
		}
	})
}

// State is what the page shows, as one replica sees Redis: the totals over every
// scope and a page of their summary rows, from a pass over every scope that ended at
// most Refresh ago (SummaryAt, by the replica SummaryBy); the tenants with quotas, the
// first MaxTenants by id (MoreTenants: more have quotas), as GET /v1/tenants answers
// them (a quota their config leaves out: no limit), read at most Refresh ago; and,
// read for this answer, the pods and deploy logs of the scopes the query names
// (Scopes, in the order named; a scope not published is left out).
type State struct {
	InstanceID  string                `json:"instance_id"`
	Now         time.Time             `json:"now"`
	SummaryAt   time.Time             `json:"summary_at"`
	SummaryBy   string                `json:"summary_by"`
	Totals      Totals                `json:"totals"`
	Filter      string                `json:"filter"`
	Sort        string                `json:"sort"`
	Offset      int                   `json:"offset"`
	Limit       int                   `json:"limit"`
	Matched     int                   `json:"matched"`
	Rows        []Row                 `json:"rows"`
	Tenants     []warmpool.TenantView `json:"tenants"`
	MoreTenants bool                  `json:"more_tenants"`
	Scopes      []ScopeState          `json:"scopes"`
}

// ScopeState is one scope on the page.
type ScopeState struct {
	ScopeID string `json:"scope_id"`
	// Tenant is the tenant the scope counts against: its config's tenant, or the
	// scope itself when it names none (SPEC §12.1).
	Tenant         string     `json:"tenant"`
	Version        int64      `json:"version"`
	DeployVer      string     `json:"deploy_ver"`
	MaxPods        int        `json:"max_pods"`
	PodConcurrency int        `json:"pod_concurrency"`
	Pods           []PodState `json:"pods"`
	Placeholders   int        `json:"placeholders"`
	Followers      int        `json:"followers"`
	Waiters        int        `json:"waiters"`
	Deploys        []Deploy   `json:"deploys"`
	// TargetIdle is how many idle pods the pool keeps now (min_idle_pods, or the
	// demand estimate under warm_policy demand, whose figures Demand has).
	TargetIdle int     `json:"target_idle"`
	WarmPolicy string  `json:"warm_policy"`
	Demand     *Demand `json:"demand"`
	// Backoff is the scope's refill backoff, as GET …/pool shows it (SPEC §11.3).
	Backoff Backoff `json:"backoff"`
}

// Demand is what a demand target came from: slots taken and freed per second across
// replicas, the lead time of a refill and the net takes expected over it.
type Demand struct {
	TakesPerS     float64 `json:"takes_per_s"`
	FreesPerS     float64 `json:"frees_per_s"`
	LeadTimeS     float64 `json:"lead_time_s"`
	ExpectedTakes float64 `json:"expected_takes"`
}

// Backoff is a scope's refill backoff: failed deploys of the current deploy_ver in a
// row (0: none), until when no deploy starts (null without a backoff) and the last
// failure's reason.
type Backoff struct {
	Failures  int        `json:"failures"`
	Until     *time.Time `json:"until"`
	LastError string     `json:"last_error"`
}

// PodState is one pod on the page.
type PodState struct {
	PodID     string     `json:"pod_id"`
	State     string     `json:"state"`
	Sessions  int        `json:"sessions"`
	Slots     int        `json:"slots"`
	DeployVer string     `json:"deploy_ver"`
	Current   bool       `json:"current"`
	CreatedAt time.Time  `json:"created_at"`
	IdleSince *time.Time `json:"idle_since"`
}

// Deploy is one finished deploy of the scope's deploy log.
type Deploy struct {
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
	Result  string    `json:"result"`
}

// PageState answers GET /v1/ui/state: the State of the query of its URL
// (ParseQuery). Errors: VALIDATION (a bad query), STORE_UNAVAILABLE.
func (u *UI) PageState(ctx context.Context, query url.Values) (any, error) {
	q, err := ParseQuery(query)
	if err != nil {
		return nil, err
	}
	return u.State(ctx, q)
}

// State answers q: the summary of every scope (shared, see summaries), the tenants
// (see tenantPanel) and the details of the scopes q names, read now. Errors:
// STORE_UNAVAILABLE.
func (u *UI) State(ctx context.Context, q Query) (State, error) {
	sum, err := u.sums.get(ctx, u.sums.ttl)
	if err != nil {
		return State{}, err
	}
	tenants, more, err := u.tenants.get(ctx)
	if err != nil {
		return State{}, err
	}
	st := State{InstanceID: u.instance, Now: u.clock.Now().UTC(), SummaryAt: sum.at.UTC(), SummaryBy: sum.by, Totals: sum.totals,
		Filter: q.Filter, Sort: q.Sort, Offset: q.Offset, Limit: q.Limit, Tenants: tenants, MoreTenants: more,
		Scopes: make([]ScopeState, 0, len(q.Detail))}
	if q.Desc {
		st.Sort = "-" + q.Sort
	}
	st.Rows, st.Matched = q.page(sum)
	for _, id := range q.Detail {
		sc, err := u.scope(ctx, id)
		if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			continue
		}
		if err != nil {
			return State{}, err
		}
		st.Scopes = append(st.Scopes, sc)
	}
	return st, nil
}

// scope reads one scope's part of the page.
func (u *UI) scope(ctx context.Context, id string) (ScopeState, error) {
	rec, err := u.store.Scope(ctx, id)
	if err != nil {
		return ScopeState{}, err
	}
	snap, err := u.store.PoolSnapshot(ctx, id)
	if err != nil {
		return ScopeState{}, err
	}
	log, err := u.store.RecentDeploys(ctx, id)
	if err != nil {
		return ScopeState{}, err
	}
	target, err := u.store.PoolTarget(ctx, id, u.clock.Now())
	if err != nil {
		return ScopeState{}, err
	}
	sc := ScopeState{ScopeID: id, Tenant: rec.Config.TenantOf(id), Version: rec.Version, DeployVer: rec.DeployVer, MaxPods: rec.Config.Pool.MaxPods(),
		PodConcurrency: rec.Config.Pool.PodConcurrency, Pods: make([]PodState, 0, len(snap.Pods)),
		Placeholders: len(snap.Deploys), Followers: len(snap.Followers), Waiters: snap.Queued, Deploys: make([]Deploy, 0, len(log)),
		TargetIdle: target.Idle, WarmPolicy: target.Policy}
	if b := snap.Backoff; b.Failures > 0 {
		until := b.Until.UTC()
		sc.Backoff = Backoff{Failures: b.Failures, Until: &until, LastError: b.LastError}
	}
	if d := target.Demand; d != nil {
		sc.Demand = &Demand{TakesPerS: d.TakesPerS, FreesPerS: d.FreesPerS, LeadTimeS: d.LeadTime.Seconds(), ExpectedTakes: d.ExpectedNeed}
	}
	for _, p := range snap.Pods {
		ps := PodState{PodID: p.Pod.ID, State: "busy", Sessions: p.Sessions(), Slots: p.Slots, DeployVer: p.Pod.DeployVer,
			Current: p.Pod.DeployVer == rec.DeployVer, CreatedAt: time.UnixMilli(p.Pod.CreatedAt).UTC()}
		if p.Idle {
			since := p.IdleSince.UTC()
			ps.State, ps.IdleSince = "idle", &since
		}
		if p.Draining { // its agent drains: it takes no new session, and goes once empty
			ps.State = "draining"
		}
		sc.Pods = append(sc.Pods, ps)
	}
	// Oldest first, as the chart reads left to right.
	for i := len(log) - 1; i >= 0; i-- {
		sc.Deploys = append(sc.Deploys, Deploy{At: log[i].At.UTC(), Seconds: log[i].Took.Seconds(), Result: log[i].Result})
	}
	return sc, nil
}

package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Sessions is what the session routes call (sm.Manager).
type Sessions interface {
	RouteWith(ctx context.Context, scope, session string, o warmpool.RouteOptions) (warmpool.Binding, error)
	Get(ctx context.Context, scope, session string) (warmpool.Binding, error)
	End(ctx context.Context, scope, session string) (bool, error)
	Touch(ctx context.Context, scope, session string) (bool, error)
}

// Pods is what the pod and pool routes call (rm.Manager).
type Pods interface {
	HoldWith(ctx context.Context, scope, requestID string, config []byte) (warmpool.Hold, error)
	ReleaseHold(ctx context.Context, scope, pod, hold string) (bool, error)
	TouchHold(ctx context.Context, scope, pod, hold string) (time.Time, error)
	Pool(ctx context.Context, scope string) (warmpool.PoolView, error)
}

// ScopeList is what GET /v1/scopes calls (ui.UI): a page of the scopes, in the order
// of their ids, after the cursor after, from the pass over every scope that the pool
// page reads too; next is the cursor of the next page, "" on the last.
type ScopeList interface {
	ScopePage(ctx context.Context, after string, limit int) (page []warmpool.ScopeSummary, next string, err error)
}

// Configs is what the config and scope-deletion routes call (scopes.Service).
type Configs interface {
	Put(ctx context.Context, scope string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, error)
	PutDryRun(ctx context.Context, scope string, cfg warmpool.ScopeConfig) (any, error)
	Get(ctx context.Context, scope string) (warmpool.StoredConfig, error)
	History(ctx context.Context, scope string, q warmpool.HistoryQuery) (warmpool.HistoryPage, error)
	Delete(ctx context.Context, scope string, force bool) (warmpool.ScopeDeleted, error)
	Sync(ctx context.Context) (int, error)
}

// PoolPage is what the pool page's routes call (ui.UI): the page, and its data for
// the query of a GET /v1/ui/state.
type PoolPage interface {
	Page() http.Handler
	PageState(ctx context.Context, query url.Values) (any, error)
}

// Reports is what the agents' report route calls (reports.Manager).
type Reports interface {
	Cap(ctx context.Context, scope, pod string, fresh bool) (most int, cached bool, err error)
	Report(ctx context.Context, r warmpool.AgentReport) (warmpool.ReportAnswer, error)
}

// SessionConfigs is what the route, the acquire and the agents' config route call for
// per-session config (sessionconfig.Service, SPEC §12.2).
type SessionConfigs interface {
	Seal(scope string, c *warmpool.SessionConfig) ([]byte, error)
	Env(ctx context.Context, scope, pod, id string) (map[string]string, error)
}

// Services are the managers behind the routes, and what the replica adds of its own.
type Services struct {
	Sessions  Sessions
	Pods      Pods
	ScopeList ScopeList
	Configs   Configs
	PoolPage  PoolPage
	Reports   Reports
	Tenants   Tenants
	// SessionConfigs seals the session configs of routes and acquires and opens them
	// for the pods' agents.
	SessionConfigs SessionConfigs
	// ReportKey checks the pods' report tokens (nil: reports are off, every report is
	// 401), and ObserveReport counts each report by how it was answered (nil: 200).
	ReportKey     *httpx.ReportKey
	ObserveReport func(err error)
	// Health and Ready answer /healthz and /readyz (the replica's own state).
	Health, Ready httpx.Handler
	// Metrics serves /metrics; nil when a listener of its own serves it.
	Metrics http.Handler
	// Auth checks the bearer token of every /v1 call (httpx.Auth).
	Auth func(http.Handler) http.Handler
	Log  *slog.Logger
}

// Router is every route of the HTTP API (SPEC §3, §10, §11) behind middleware: the
// one place that lists them. Every /v1 call goes through one sub-router (exact paths,
// then auth); RequireAdmin marks the admin calls, Waits the calls that may wait long
// and Bodyless the POST and DELETE calls that take no body (none, or {}).
func Router(s Services, middleware ...func(http.Handler) http.Handler) http.Handler {
	a := &handlers{Services: s}
	h := httpx.Adapter(s.Log)
	admin := httpx.RequireAdmin(s.Log)
	r := chi.NewRouter()
	r.Use(middleware...)
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed)

	// Operations, open without auth.
	r.Method(http.MethodGet, "/healthz", h(s.Health))
	r.Method(http.MethodGet, "/readyz", h(s.Ready))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics)
	}
	r.Method(http.MethodGet, "/openapi.yaml", Handler())
	r.Method(http.MethodGet, "/ui", s.PoolPage.Page())

	// Agents report with their pods' own tokens, not the gateway's (SPEC §11.2).
	r.Method(http.MethodPost, "/v1/agents/report", h(a.agentReport))
	r.Method(http.MethodGet, "/v1/agents/sessions/{session}/config", h(a.agentSessionConfig))
	r.Route("/v1", func(r chi.Router) {
		r.Use(exactPaths, s.Auth)
		r.Method(http.MethodGet, "/scopes", h(a.listScopes))
		r.With(admin).Method(http.MethodPost, "/config/sync", h(httpx.Bodyless(a.syncConfigs)))
		r.With(admin).Method(http.MethodGet, "/ui/state", h(a.poolPageState))
		// The scope's routes are one level under /v1, not sub-routers of their own:
		// each sub-router a call goes through matches the path again, copies the
		// route's pattern and path values, and a warm route is a few dozen µs in all.
		r.With(admin).Method(http.MethodDelete, "/scopes/{scope}", h(httpx.Bodyless(a.deleteScope)))
		r.With(httpx.Waits).Method(http.MethodPost, "/scopes/{scope}/sessions", h(a.routeSession))
		r.Method(http.MethodGet, "/scopes/{scope}/sessions/{session}", h(onSession(s.Sessions.Get, func(b warmpool.Binding) any { return a.ticketed(b) })))
		r.Method(http.MethodDelete, "/scopes/{scope}/sessions/{session}", h(httpx.Bodyless(onSession(s.Sessions.End, answer("released")))))
		r.Method(http.MethodPost, "/scopes/{scope}/sessions/{session}/touch", h(httpx.Bodyless(onSession(s.Sessions.Touch, answer("touched")))))
		r.With(httpx.Waits).Method(http.MethodPost, "/scopes/{scope}/pods/acquire", h(a.acquirePod))
		r.Method(http.MethodPost, "/scopes/{scope}/pods/{pod}/release", h(onHold(s.Pods.ReleaseHold,
			func(idle bool) any { return map[string]bool{"released": true, "idle": idle} })))
		r.Method(http.MethodPost, "/scopes/{scope}/pods/{pod}/touch", h(onHold(s.Pods.TouchHold,
			func(until time.Time) any { return map[string]string{"hold_until": holdTime(until)} })))
		r.Method(http.MethodGet, "/scopes/{scope}/pool", h(httpx.OnScope(s.Pods.Pool, func(_ string, p warmpool.PoolView) any { return p })))
		r.With(admin).Method(http.MethodPut, "/scopes/{scope}/config", h(a.putConfig))
		r.With(admin).Method(http.MethodGet, "/scopes/{scope}/config", h(httpx.OnScope(s.Configs.Get, func(_ string, c warmpool.StoredConfig) any { return c })))
		r.With(admin).Method(http.MethodGet, "/scopes/{scope}/config/history", h(a.configHistory))
		r.With(admin).Method(http.MethodGet, "/tenants", h(a.listTenants))
		r.With(admin).Method(http.MethodPut, "/tenants/{tenant}", h(a.putTenant))
		r.With(admin).Method(http.MethodGet, "/tenants/{tenant}", h(a.getTenant))
		r.With(admin).Method(http.MethodDelete, "/tenants/{tenant}", h(httpx.Bodyless(a.deleteTenant)))
	})
	return r
}

// exactPaths answers 404 for a path with a trailing slash: a mounted sub-router's root
// (/v1) matches with and without one, and the API has only the paths the document
// names.
func exactPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			httpx.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handlers are the routes' handlers that need more than one call.
type handlers struct{ Services }

// answer replies with the one-key object {key: v}, as end and touch do.
func answer(key string) func(bool) any {
	return func(v bool) any { return map[string]bool{key: v} }
}

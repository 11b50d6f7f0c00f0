package rm

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Routes adds the pod routes of SPEC §3 and §10 (holds) and the scope listing to r,
// which is mounted at /v1.
func (m *Manager) Routes(r chi.Router) {
	h := httpx.Adapter(m.log)
	r.Method(http.MethodGet, "/scopes", h(m.handleScopes))
	r.With(httpx.Waits).Method(http.MethodPost, "/scopes/{scope}/pods/acquire", h(m.handleAcquire))
	// Release: 200 {"released": true, "idle"}; touch: 200 {"hold_until"}; either
	// HOLD_NOT_FOUND.
	r.Method(http.MethodPost, "/scopes/{scope}/pods/{pod}/release", h(onHold(m.ReleaseHold,
		func(idle bool) any { return map[string]bool{"released": true, "idle": idle} })))
	r.Method(http.MethodPost, "/scopes/{scope}/pods/{pod}/touch", h(onHold(m.TouchHold,
		func(until time.Time) any { return map[string]string{"hold_until": holdTime(until)} })))
	r.Method(http.MethodGet, "/scopes/{scope}/pool", h(m.handlePool))
}

type acquireRequest struct {
	RequestID string `json:"request_id"`
}

type acquireResponse struct {
	PodID     string `json:"pod_id"`
	SSEURL    string `json:"pod_sse_url"`
	DeployVer string `json:"deploy_ver"`
	Source    string `json:"source"`
	HoldID    string `json:"hold_id"`
	HoldUntil string `json:"hold_until"`
}

// holdTime formats a hold's deadline as RFC 3339 in UTC, to the millisecond.
func holdTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// handleAcquire hands a pod to an API caller as a hold on one of its slots.
func (m *Manager) handleAcquire(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
	if err != nil {
		return err
	}
	var req acquireRequest
	if err := httpx.Decode(w, r, &req, true); err != nil {
		return err
	}
	requestID, err := httpx.IdempotencyKey(r, req.RequestID)
	if err != nil {
		return err
	}
	if err := warmpool.CheckRequestID(requestID); err != nil {
		return err
	}
	h, err := m.Hold(r.Context(), scope, requestID)
	if err != nil {
		return err
	}
	return httpx.OK(w, acquireResponse{PodID: h.Pod.ID, SSEURL: h.Pod.SSEURL, DeployVer: h.Pod.DeployVer, Source: h.Source,
		HoldID: h.ID, HoldUntil: holdTime(h.Until)})
}

type holdRequest struct {
	HoldID string `json:"hold_id"`
}

// onHold serves a release or a touch of a hold: the scope, the pod and the hold id
// are read and validated, then call runs and its result is answered as reply(result).
func onHold[T any](call func(ctx context.Context, scope, pod, hold string) (T, error), reply func(T) any) httpx.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		scope, err := httpx.Scope(r)
		if err != nil {
			return err
		}
		pod, err := httpx.Param(r, "pod", warmpool.ValidPodID, "a DNS-1123 name")
		if err != nil {
			return err
		}
		var req holdRequest
		if err := httpx.Decode(w, r, &req, false); err != nil {
			return err
		}
		if !warmpool.ValidRequestID(req.HoldID) {
			return warmpool.Errorf(warmpool.CodeValidation, "hold_id: required, 1-128 chars of [A-Za-z0-9._:/+=-]")
		}
		v, err := call(r.Context(), scope, pod, req.HoldID)
		if err != nil {
			return err
		}
		return httpx.OK(w, reply(v))
	}
}

type poolPod struct {
	PodID     string     `json:"pod_id"`
	State     string     `json:"state"`
	Sessions  int        `json:"sessions"`
	Slots     int        `json:"slots"`
	DeployVer string     `json:"deploy_ver"`
	SSEURL    string     `json:"pod_sse_url"`
	IdleSince *time.Time `json:"idle_since"`
}

type poolResponse struct {
	ScopeID      string    `json:"scope_id"`
	DeployVer    string    `json:"deploy_ver"`
	MaxPods      int       `json:"max_pods"`
	Pods         []poolPod `json:"pods"`
	Placeholders int       `json:"placeholders"`
	Followers    int       `json:"followers"`
	Waiters      int       `json:"waiters"`
}

func (m *Manager) handlePool(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
	if err != nil {
		return err
	}
	rec, err := m.store.Scope(r.Context(), scope)
	if err != nil {
		return err
	}
	snap, err := m.store.PoolSnapshot(r.Context(), scope)
	if err != nil {
		return err
	}
	resp := poolResponse{
		ScopeID: scope, DeployVer: rec.DeployVer, MaxPods: rec.Config.Pool.MaxPods(), Pods: []poolPod{},
		Placeholders: len(snap.Deploys), Followers: len(snap.Followers), Waiters: snap.Queued,
	}
	for _, p := range snap.Pods {
		pp := poolPod{PodID: p.Pod.ID, State: "busy", Sessions: p.Sessions(), Slots: p.Slots, DeployVer: p.Pod.DeployVer, SSEURL: p.Pod.SSEURL}
		if p.Idle {
			since := p.IdleSince.UTC()
			pp.State, pp.IdleSince = "idle", &since
		}
		resp.Pods = append(resp.Pods, pp)
	}
	return httpx.OK(w, resp)
}

type scopeListing struct {
	ScopeID   string `json:"scope_id"`
	DeployVer string `json:"deploy_ver"`
	Version   int64  `json:"version"`
	Pods      int64  `json:"pods"`
	IdlePods  int64  `json:"idle_pods"`
	BusyPods  int64  `json:"busy_pods"`
	Sessions  int64  `json:"sessions"`
	Deploying int64  `json:"deploying"`
	Waiters   int64  `json:"waiters"`
}

// handleScopes answers GET /v1/scopes: every scope with its pod and session counts.
func (m *Manager) handleScopes(w http.ResponseWriter, r *http.Request) error {
	counts, err := m.store.Counts(r.Context())
	if err != nil {
		return err
	}
	out := make([]scopeListing, 0, len(counts))
	for _, c := range counts {
		out = append(out, scopeListing{ScopeID: c.ScopeID, DeployVer: c.DeployVer, Version: c.Version, Pods: c.Pods,
			IdlePods: c.Idle, BusyPods: c.Pods - c.Idle, Sessions: c.Sessions, Deploying: c.Deploying, Waiters: c.Waiters})
	}
	return httpx.OK(w, map[string]any{"scopes": out})
}

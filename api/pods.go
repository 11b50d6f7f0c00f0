package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

type acquireRequest struct {
	RequestID     string                  `json:"request_id"`
	SessionConfig *warmpool.SessionConfig `json:"session_config"`
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

// acquirePod answers POST /v1/scopes/{scope}/pods/acquire: a pod for an API caller,
// as a hold on one of its slots.
func (a *handlers) acquirePod(w http.ResponseWriter, r *http.Request) error {
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
	config, err := a.SessionConfigs.Seal(scope, req.SessionConfig)
	if err != nil {
		return err
	}
	h, err := a.Pods.HoldWith(r.Context(), scope, requestID, config)
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

// Bounds of GET /v1/scopes's limit (SPEC §12.4).
const (
	DefaultScopesLimit = 100
	MaxScopesLimit     = 500
)

// scopePage is the answer of GET /v1/scopes: Next is null on the last page.
type scopePage struct {
	Scopes []scopeListing `json:"scopes"`
	Next   *string        `json:"next"`
}

// listScopes answers GET /v1/scopes[?limit=N&after=CURSOR]: a page of the scopes with
// their pod and session counts, in the order of their ids, and the cursor of the next.
func (a *handlers) listScopes(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := pageQuery(r.URL.Query(), "scope")
	if err != nil {
		return err
	}
	page, next, err := a.ScopeList.ScopePage(r.Context(), after, limit)
	if err != nil {
		return err
	}
	out := scopePage{Scopes: make([]scopeListing, 0, len(page))}
	for _, c := range page {
		out.Scopes = append(out.Scopes, scopeListing{ScopeID: c.ScopeID, DeployVer: c.DeployVer, Version: c.Version, Pods: c.Pods,
			IdlePods: c.Idle, BusyPods: c.Pods - c.Idle, Sessions: c.Sessions, Deploying: c.Deploying, Waiters: c.Waiters})
	}
	if next != "" {
		out.Next = &next
	}
	return httpx.OK(w, out)
}

// pageQuery reads the limit (DefaultScopesLimit when not given) and after, the cursor
// (the next of the page before: an id of kind, scope or tenant, which follow one
// rule; none for the first page), of GET /v1/scopes and GET /v1/tenants. Errors:
// VALIDATION naming the parameter.
func pageQuery(v url.Values, kind string) (after string, limit int, err error) {
	limit = DefaultScopesLimit
	if l, ok := v["limit"]; ok {
		n, err := strconv.Atoi(l[0])
		if err != nil || len(l) > 1 || n < 1 || n > MaxScopesLimit {
			return "", 0, warmpool.Errorf(warmpool.CodeValidation, "limit: want one integer from 1 to %d, got %q", MaxScopesLimit, strings.Join(l, ","))
		}
		limit = n
	}
	if c, ok := v["after"]; ok {
		if len(c) > 1 || !warmpool.ValidScopeID(c[0]) {
			return "", 0, warmpool.Errorf(warmpool.CodeValidation, "after: want one cursor, the next of the page before (a %s id), got %q", kind, strings.Join(c, ","))
		}
		after = c[0]
	}
	return after, limit, nil
}

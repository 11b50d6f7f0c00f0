package api

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

type putResponse struct {
	ScopeID   string `json:"scope_id"`
	Version   int64  `json:"version"`
	DeployVer string `json:"deploy_ver"`
}

// putConfig answers PUT /v1/scopes/{scope}/config: the document is decoded strictly
// (which normalizes it), then stored and published.
func (a *handlers) putConfig(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
	if err != nil {
		return err
	}
	body, err := httpx.Body(w, r)
	if err != nil {
		return err
	}
	cfg, err := httpx.DecodeScopeConfig(bytes.NewReader(body))
	if err != nil {
		return err
	}
	dry, err := boolQuery(r.URL.Query(), "dry_run")
	if err != nil {
		return err
	}
	if dry {
		pod, err := a.Configs.PutDryRun(r.Context(), scope, cfg)
		if err != nil {
			return err
		}
		return httpx.OK(w, map[string]any{"pod": pod})
	}
	stored, err := a.Configs.Put(r.Context(), scope, cfg)
	if err != nil {
		return err
	}
	return httpx.OK(w, putResponse{ScopeID: scope, Version: stored.Version, DeployVer: stored.DeployVer})
}

type historyResponse struct {
	ScopeID    string                  `json:"scope_id"`
	Versions   []warmpool.StoredConfig `json:"versions"`
	NextBefore int64                   `json:"next_before,omitempty"`
}

// configHistory answers GET /v1/scopes/{scope}/config/history[?limit=N&before=V]: a
// page of the scope's versions, newest first, with next_before when older ones
// remain.
func (a *handlers) configHistory(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
	if err != nil {
		return err
	}
	q, err := historyQuery(r.URL.Query())
	if err != nil {
		return err
	}
	page, err := a.Configs.History(r.Context(), scope, q)
	if err != nil {
		return err
	}
	return httpx.OK(w, historyResponse{ScopeID: scope, Versions: page.Versions, NextBefore: page.NextBefore})
}

// historyQuery reads a history page's limit (DefaultHistoryLimit when not given)
// and before from the query; the store checks the limit's range
// (warmpool.HistoryQuery.Check). Errors: VALIDATION naming the parameter.
func historyQuery(v url.Values) (warmpool.HistoryQuery, error) {
	q := warmpool.HistoryQuery{Limit: warmpool.DefaultHistoryLimit}
	if l, ok := v["limit"]; ok {
		n, err := strconv.Atoi(l[0])
		if err != nil || len(l) > 1 {
			return q, warmpool.Errorf(warmpool.CodeValidation, "limit: want one integer from 1 to %d, got %q", warmpool.MaxHistoryLimit, strings.Join(l, ","))
		}
		q.Limit = n
	}
	if b, ok := v["before"]; ok {
		n, err := strconv.ParseInt(b[0], 10, 64)
		if err != nil || len(b) > 1 || n < 1 {
			return q, warmpool.Errorf(warmpool.CodeValidation, "before: want one version (an integer of 1 or more), got %q", strings.Join(b, ","))
		}
		q.Before = n
	}
	return q, nil
}

// syncConfigs answers POST /v1/config/sync.
func (a *handlers) syncConfigs(w http.ResponseWriter, r *http.Request) error {
	n, err := a.Configs.Sync(r.Context())
	if err != nil {
		return err
	}
	return httpx.OK(w, map[string]int{"scopes": n})
}

// deleteScope answers DELETE /v1/scopes/{scope}[?force=true].
func (a *handlers) deleteScope(w http.ResponseWriter, r *http.Request) error {
	scope, err := httpx.Scope(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r.URL.Query(), "force")
	if err != nil {
		return err
	}
	d, err := a.Configs.Delete(r.Context(), scope, force)
	if err != nil {
		return err
	}
	return httpx.OK(w, d)
}

// boolQuery reads the query parameter name as one true or false (false when absent).
// Errors: VALIDATION naming it.
func boolQuery(q url.Values, name string) (bool, error) {
	v, ok := q[name]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil || len(v) > 1 {
		return false, warmpool.Errorf(warmpool.CodeValidation, "%s: want one true or false, got %q", name, strings.Join(v, ","))
	}
	return b, nil
}

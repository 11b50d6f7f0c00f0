package api

import (
	"context"
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Tenants is what the tenant routes call (tenants.Service, SPEC §12.1).
type Tenants interface {
	// Put validates and stores the tenant's quotas as its next version and publishes
	// them. Errors: VALIDATION, STORE_UNAVAILABLE.
	Put(ctx context.Context, tenant string, cfg warmpool.TenantConfig) (warmpool.StoredTenant, error)
	// Get answers the tenant's quotas, use and share. Errors: VALIDATION,
	// TENANT_NOT_FOUND, STORE_UNAVAILABLE.
	Get(ctx context.Context, tenant string) (warmpool.TenantView, error)
	// List answers a page of the tenants with quotas after the id after, and the
	// cursor of the next page ("" on the last). Errors: STORE_UNAVAILABLE.
	List(ctx context.Context, after string, limit int) ([]warmpool.TenantView, string, error)
	// Delete removes the tenant's quotas. Errors: VALIDATION, TENANT_NOT_FOUND,
	// STORE_UNAVAILABLE.
	Delete(ctx context.Context, tenant string) (warmpool.TenantDeleted, error)
}

// tenantParam returns the {tenant} URL parameter, validated.
func tenantParam(r *http.Request) (string, error) {
	return httpx.Param(r, "tenant", warmpool.ValidScopeID, "^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
}

// putTenant answers PUT /v1/tenants/{tenant}: the quotas are decoded strictly and
// checked, then stored and published.
func (a *handlers) putTenant(w http.ResponseWriter, r *http.Request) error {
	tenant, err := tenantParam(r)
	if err != nil {
		return err
	}
	body, err := httpx.Body(w, r)
	if err != nil {
		return err
	}
	cfg, err := httpx.DecodeTenantConfig(body)
	if err != nil {
		return err
	}
	stored, err := a.Tenants.Put(r.Context(), tenant, cfg)
	if err != nil {
		return err
	}
	return httpx.OK(w, map[string]any{"tenant": tenant, "version": stored.Version})
}

// getTenant answers GET /v1/tenants/{tenant}.
func (a *handlers) getTenant(w http.ResponseWriter, r *http.Request) error {
	tenant, err := tenantParam(r)
	if err != nil {
		return err
	}
	t, err := a.Tenants.Get(r.Context(), tenant)
	if err != nil {
		return err
	}
	return httpx.OK(w, t)
}

// deleteTenant answers DELETE /v1/tenants/{tenant}.
func (a *handlers) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	tenant, err := tenantParam(r)
	if err != nil {
		return err
	}
	d, err := a.Tenants.Delete(r.Context(), tenant)
	if err != nil {
		return err
	}
	return httpx.OK(w, d)
}

// tenantPage is the answer of GET /v1/tenants: Next is null on the last page.
type tenantPage struct {
	Tenants []warmpool.TenantView `json:"tenants"`
	Next    *string               `json:"next"`
}

// listTenants answers GET /v1/tenants[?limit=N&after=CURSOR]: a page of the tenants
// with quotas, as GET /v1/scopes pages the scopes.
func (a *handlers) listTenants(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := pageQuery(r.URL.Query(), "tenant")
	if err != nil {
		return err
	}
	page, next, err := a.Tenants.List(r.Context(), after, limit)
	if err != nil {
		return err
	}
	out := tenantPage{Tenants: page}
	if next != "" {
		out.Next = &next
	}
	return httpx.OK(w, out)
}

package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
)

// NewTenantVersion checks the tenant id and encodes cfg for a PutTenant: the version
// to store, with the write time at the millisecond a read gives back, and its JSON
// document. The store sets the version. Errors: VALIDATION (a bad tenant id),
// INTERNAL (cfg does not encode).
func NewTenantVersion(tenant string, cfg warmpool.TenantConfig) (warmpool.StoredTenant, []byte, error) {
	if err := warmpool.CheckTenantID(tenant); err != nil {
		return warmpool.StoredTenant{}, nil, err
	}
	doc, err := json.Marshal(cfg)
	if err != nil {
		return warmpool.StoredTenant{}, nil, warmpool.Errorf(warmpool.CodeInternal, "config store: encode tenant %q: %v", tenant, err)
	}
	return warmpool.StoredTenant{TenantID: tenant, Config: cfg, UpdatedAt: time.UnixMilli(time.Now().UnixMilli()).UTC()}, doc, nil
}

// TenantQueries are a store's tenant read queries, in its dialect. Both select
// tenant_id, version, config_json (NULL for a version that deletes the tenant) and
// created_at.
type TenantQueries struct {
	// Latest selects the latest version of the tenant given as its one argument,
	// deleted or not.
	Latest string
	// List selects the latest version of the tenants with ids past argument 1 whose
	// latest version is not a delete, by id, at most argument 2.
	List string
}

// TenantReader reads stored tenants for a store, which embeds it.
type TenantReader struct {
	db      *sql.DB
	failure func(ctx context.Context, op string, err error) error
	q       TenantQueries
}

// NewTenantReader returns the TenantReader of a store on db. failure classifies
// database errors.
func NewTenantReader(db *sql.DB, failure func(ctx context.Context, op string, err error) error, q TenantQueries) TenantReader {
	return TenantReader{db: db, failure: failure, q: q}
}

// GetTenant returns the latest version of the tenant (warmpool.TenantStore).
// Errors: warmpool.ErrNoTenantConfig, STORE_UNAVAILABLE, or ctx.Err().
func (r *TenantReader) GetTenant(ctx context.Context, tenant string) (warmpool.StoredTenant, error) {
	t, deleted, err := scanTenant(r.db.QueryRowContext(ctx, r.q.Latest, tenant))
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && deleted:
		return warmpool.StoredTenant{}, fmt.Errorf("tenant %q: %w", tenant, warmpool.ErrNoTenantConfig)
	case err != nil:
		return warmpool.StoredTenant{}, r.failure(ctx, fmt.Sprintf("get tenant %q", tenant), err)
	}
	return t, nil
}

// LatestTenant reads in tx the tenant's latest version and whether it deletes the
// tenant; ok is false when the tenant has none.
func (r *TenantReader) LatestTenant(ctx context.Context, tx *sql.Tx, tenant string) (version int64, deleted, ok bool, err error) {
	t, deleted, err := scanTenant(tx.QueryRowContext(ctx, r.q.Latest, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, nil
	}
	return t.Version, deleted, err == nil, err
}

// ListTenants returns a page of the tenants with quotas (warmpool.TenantStore); an
// empty page is an empty, non-nil slice. Errors: STORE_UNAVAILABLE, or ctx.Err().
func (r *TenantReader) ListTenants(ctx context.Context, after string, limit int) ([]warmpool.StoredTenant, error) {
	rows, err := r.db.QueryContext(ctx, r.q.List, after, limit)
	if err != nil {
		return nil, r.failure(ctx, "list tenants", err)
	}
	defer rows.Close()
	out := []warmpool.StoredTenant{}
	for rows.Next() {
		t, _, err := scanTenant(rows)
		if err != nil {
			return nil, r.failure(ctx, "list tenants", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, r.failure(ctx, "list tenants", err)
	}
	return out, nil
}

// scanTenant reads one row of a TenantReader query, and whether it deletes the
// tenant (its config_json is NULL).
func scanTenant(row interface{ Scan(...any) error }) (warmpool.StoredTenant, bool, error) {
	var (
		t       warmpool.StoredTenant
		doc     []byte
		created timestamp
	)
	if err := row.Scan(&t.TenantID, &t.Version, &doc, &created); err != nil {
		return warmpool.StoredTenant{}, false, err
	}
	t.UpdatedAt = time.Time(created).UTC()
	if doc == nil {
		return t, true, nil
	}
	if err := json.Unmarshal(doc, &t.Config); err != nil {
		return warmpool.StoredTenant{}, false, &CorruptError{ScopeID: t.TenantID, Version: t.Version, Err: err, Tenant: true}
	}
	return t, false, nil
}

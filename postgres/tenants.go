package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/sqlstore"
)

// lastSeq selects the number of the latest change of the feed, a scope's or a
// tenant's: both tables are numbered by the counter of config_feed.
const lastSeq = `SELECT GREATEST((SELECT COALESCE(MAX(seq), 0) FROM scope_changes), (SELECT COALESCE(MAX(seq), 0) FROM tenant_changes))`

// feedSince selects the changes of both tables past $1, by number, at most $2.
const feedSince = `SELECT seq, scope_id, '', version, deleted FROM scope_changes WHERE seq > $1
	UNION ALL SELECT seq, '', tenant_id, version, deleted FROM tenant_changes WHERE seq > $1
	ORDER BY seq LIMIT $2`

// tenantReader is the store's sqlstore.TenantReader, in PostgreSQL's dialect.
func tenantReader(db *sql.DB) sqlstore.TenantReader {
	const latest = `SELECT v.tenant_id, v.version, v.config_json, v.created_at
		FROM tenant_heads AS h JOIN tenant_versions AS v ON v.tenant_id = h.tenant_id AND v.version = h.version`
	return sqlstore.NewTenantReader(db, failure, sqlstore.TenantQueries{
		Latest: latest + ` WHERE h.tenant_id = $1`,
		List:   latest + ` WHERE h.tenant_id > $1 AND v.config_json IS NOT NULL ORDER BY h.tenant_id LIMIT $2`,
	})
}

// PutTenant stores cfg as the tenant's next version (warmpool.TenantStore). Errors:
// VALIDATION (a bad tenant id), STORE_UNAVAILABLE, or ctx.Err().
func (s *Store) PutTenant(ctx context.Context, tenant string, cfg warmpool.TenantConfig) (warmpool.StoredTenant, error) {
	stored, doc, err := sqlstore.NewTenantVersion(tenant, cfg)
	if err != nil {
		return warmpool.StoredTenant{}, err
	}
	text := string(doc)
	stored.Version, err = s.writeTenant(ctx, fmt.Sprintf("put tenant %q", tenant), tenant, &text, stored.UpdatedAt)
	if err != nil {
		return warmpool.StoredTenant{}, err
	}
	return stored, nil
}

// DeleteTenant stores the tenant's next version as deleted (warmpool.TenantStore).
// Errors: warmpool.ErrNoTenantConfig, STORE_UNAVAILABLE, or ctx.Err().
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (int64, error) {
	return s.writeTenant(ctx, fmt.Sprintf("delete tenant %q", tenant), tenant, nil, time.Now())
}

// writeTenant writes the tenant's next version, of doc (nil: a delete, refused with
// ErrNoTenantConfig unless the latest version holds quotas), and numbers it as the
// feed's next change, in one transaction. A delete locks the tenant's head row
// before it reads the latest version; a put bumps it first: writers of one tenant
// take turns on it.
func (s *Store) writeTenant(ctx context.Context, op, tenant string, doc *string, at time.Time) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, failure(ctx, op, err)
	}
	defer tx.Rollback() // no-op after Commit
	var version int64
	if doc == nil {
		if _, err := tx.ExecContext(ctx, `SELECT version FROM tenant_heads WHERE tenant_id = $1 FOR UPDATE`, tenant); err != nil {
			return 0, failure(ctx, op, err)
		}
		_, deleted, ok, err := s.LatestTenant(ctx, tx, tenant)
		if err != nil {
			return 0, failure(ctx, op, err)
		}
		if !ok || deleted {
			return 0, fmt.Errorf("tenant %q: %w", tenant, warmpool.ErrNoTenantConfig)
		}
	}
	if err := tx.QueryRowContext(ctx, `
		INSERT INTO tenant_heads AS h (tenant_id, version) VALUES ($1, 1)
		ON CONFLICT (tenant_id) DO UPDATE SET version = h.version + 1
		RETURNING h.version`, tenant).Scan(&version); err != nil {
		return 0, failure(ctx, op, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tenant_versions (tenant_id, version, config_json, created_at) VALUES ($1, $2, $3, $4)`,
		tenant, version, doc, at); err != nil {
		return 0, failure(ctx, op, err)
	}
	if _, err := tx.ExecContext(ctx, `
		WITH n AS (UPDATE config_feed SET seq = seq + 1 RETURNING seq)
		INSERT INTO tenant_changes (tenant_id, seq, version, deleted) SELECT $1, n.seq, $2, $3 FROM n
		ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, version = excluded.version, deleted = excluded.deleted`,
		tenant, version, doc == nil); err != nil {
		return 0, failure(ctx, op, err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, '')`, s.channel); err != nil {
		return 0, failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, failure(ctx, op, err)
	}
	return version, nil
}

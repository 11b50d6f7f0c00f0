package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/sqlstore"
)

// lastSeq selects the number of the latest change of the feed, a scope's or a
// tenant's: the two change tables share one sequence.
const lastSeq = `SELECT COALESCE(MAX(m), 0) FROM (SELECT MAX(seq) AS m FROM scope_changes UNION ALL SELECT MAX(seq) FROM tenant_changes)`

// feedSince selects the changes of both tables past ?1, by number, at most ?2.
const feedSince = `SELECT seq, scope_id, '', version, deleted FROM scope_changes WHERE seq > ?1
	UNION ALL SELECT seq, '', tenant_id, version, deleted FROM tenant_changes WHERE seq > ?1
	ORDER BY seq LIMIT ?2`

// tenantReader is the store's sqlstore.TenantReader, in SQLite's dialect.
func tenantReader(db *sql.DB) sqlstore.TenantReader {
	return sqlstore.NewTenantReader(db, failure, sqlstore.TenantQueries{
		Latest: `SELECT tenant_id, version, config_json, created_at FROM tenant_versions
			WHERE tenant_id = ? ORDER BY version DESC LIMIT 1`,
		List: `SELECT v.tenant_id, v.version, v.config_json, v.created_at
			FROM (SELECT tenant_id, MAX(version) AS version FROM tenant_versions WHERE tenant_id > ?1 GROUP BY tenant_id) AS m
			JOIN tenant_versions AS v ON v.tenant_id = m.tenant_id AND v.version = m.version
			WHERE v.config_json IS NOT NULL ORDER BY v.tenant_id LIMIT ?2`,
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
// feed's next change, in one transaction under the write lock (BEGIN IMMEDIATE).
func (s *Store) writeTenant(ctx context.Context, op, tenant string, doc *string, at time.Time) (int64, error) {
	release, err := s.writeTurn(ctx, op)
	if err != nil {
		return 0, err
	}
	defer release()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, failure(ctx, op, err)
	}
	defer tx.Rollback() // no-op after Commit
	if doc == nil {
		_, deleted, ok, err := s.LatestTenant(ctx, tx, tenant)
		if err != nil {
			return 0, failure(ctx, op, err)
		}
		if !ok || deleted {
			return 0, fmt.Errorf("tenant %q: %w", tenant, warmpool.ErrNoTenantConfig)
		}
	}
	var version int64
	if err := tx.QueryRowContext(ctx, `
		INSERT INTO tenant_versions (tenant_id, version, config_json, created_at)
		SELECT ?1, COALESCE(MAX(version), 0) + 1, ?2, ?3 FROM tenant_versions WHERE tenant_id = ?1
		RETURNING version`, tenant, doc, at.UnixMilli()).Scan(&version); err != nil {
		return 0, failure(ctx, op, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO tenant_changes (tenant_id, seq, version, deleted) VALUES (?1, (`+lastSeq+`) + 1, ?2, ?3)
		ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, version = excluded.version, deleted = excluded.deleted`,
		tenant, version, doc == nil); err != nil {
		return 0, failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, failure(ctx, op, err)
	}
	return version, nil
}

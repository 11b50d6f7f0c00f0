// Package postgres is the config store that replicas share: scope configs in
// PostgreSQL (github.com/jackc/pgx/v5 through database/sql). Every Put is a new row, so
// the history of a scope is kept.
//
// A Put is one transaction that first bumps the scope's row in scope_heads (INSERT …
// ON CONFLICT DO UPDATE, which locks the row until commit) and then inserts the new
// version. Writers of one scope, in this process or in another replica, take turns on
// that row, so each gets the previous version + 1 and none is lost. Its last step
// numbers the write for the change feed (feed.go) on one counter row, locked until the
// commit: there writers of different scopes take turns too, so the numbers follow the
// commit order.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/sqlstore"
)

// Connection defaults; a DSN that sets connect_timeout keeps its own.
const (
	// ConnectTimeout bounds each connection attempt, so a server that does not answer
	// makes calls fail with STORE_UNAVAILABLE instead of hanging.
	ConnectTimeout = 5 * time.Second
	// MaxOpenConns is the connection pool's size: config writes are rare and reads
	// short, and three replicas stay far below PostgreSQL's default max_connections.
	MaxOpenConns = 8
	// ConnMaxIdleTime closes connections left unused this long.
	ConnMaxIdleTime = 5 * time.Minute
)

// Store is a warmpool.ConfigStore on PostgreSQL. It is safe for concurrent use.
type Store struct {
	db              *sql.DB
	sqlstore.Reader // Get, List, History, Close
	// GetTenant, ListTenants; tenants.go writes.
	sqlstore.TenantReader
	feed sqlstore.Feed
	// conn is the parsed DSN, for the feed's own listening connection; channel is the
	// feed's notification channel, one per schema (see feedChannel).
	conn    *pgx.ConnConfig
	channel string
	// beforeListen, when set (by tests), runs each time the feed has connected and is
	// about to LISTEN.
	beforeListen func()
}

var (
	_ warmpool.ConfigStore = (*Store)(nil)
	_ warmpool.ConfigFeed  = (*Store)(nil)
)

// Open connects to the database named by dsn (postgres://user:pass@host:port/db?…,
// or the key=value form) and applies any pending migration. Tables are created in
// the first schema of the search_path (a search_path parameter of the DSN chooses
// it). Errors: VALIDATION for a DSN that does not parse, STORE_UNAVAILABLE, or
// ctx.Err().
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx leaves the password out of its parse errors.
		return nil, warmpool.Errorf(warmpool.CodeValidation, "postgres: %v", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = ConnectTimeout
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(MaxOpenConns)
	db.SetMaxIdleConns(MaxOpenConns)
	db.SetConnMaxIdleTime(ConnMaxIdleTime)
	s := &Store{db: db, Reader: reader(db), TenantReader: tenantReader(db), conn: cfg, feed: sqlstore.NewFeed(db, failure, feedSince, lastSeq)}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close() // the open's error is the one to report
		return nil, failure(ctx, "open", err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close() // the migration's error is the one to report
		return nil, err
	}
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(current_schema(), '')`).Scan(&schema); err != nil {
		_ = db.Close() // the open's error is the one to report
		return nil, failure(ctx, "open", err)
	}
	s.channel = feedChannel(schema)
	return s, nil
}

// Put stores cfg, which must be normalized (warmpool.ScopeConfig.Normalize), as the
// scope's next version; the store fills no default and keeps cfg as given.
// Errors: VALIDATION (a bad scope id), STORE_UNAVAILABLE, INTERNAL (the tables were
// edited by hand into a state Put cannot extend), or ctx.Err().
func (s *Store) Put(ctx context.Context, scopeID string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, error) {
	stored, doc, err := sqlstore.NewVersion(scopeID, cfg)
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	op := fmt.Sprintf("put %q", scopeID)

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	defer tx.Rollback() // no-op after Commit
	// The row lock taken here is held until Commit: a concurrent Put of the scope
	// waits on it and then bumps the version this one committed.
	err = tx.QueryRowContext(ctx, `
		INSERT INTO scope_heads AS h (scope_id, version) VALUES ($1, 1)
		ON CONFLICT (scope_id) DO UPDATE SET version = h.version + 1
		RETURNING h.version`, scopeID).Scan(&stored.Version)
	if err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
		VALUES ($1, $2, $3, $4, $5)`,
		scopeID, stored.Version, stored.DeployVer, string(doc), stored.UpdatedAt)
	if err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	if err := s.recordChange(ctx, tx, scopeID, stored.Version, false); err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	return stored, nil
}

// Delete marks the scope deleted at its latest version (warmpool.ConfigStore).
// Errors: SCOPE_NOT_FOUND (unknown, or deleted already), STORE_UNAVAILABLE, or
// ctx.Err().
func (s *Store) Delete(ctx context.Context, scopeID string) (warmpool.StoredConfig, error) {
	// The scope's head row, locked until Commit: a concurrent Put of the scope waits,
	// and then makes it live again at the next version.
	return s.Reader.Delete(ctx, scopeID, `SELECT version FROM scope_heads WHERE scope_id = $1 FOR UPDATE`,
		func(ctx context.Context, tx *sql.Tx, scopeID string, version int64) error {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO scope_deletions (scope_id, version) VALUES ($1, $2)
				ON CONFLICT (scope_id) DO UPDATE SET version = excluded.version`, scopeID, version); err != nil {
				return err
			}
			return s.recordChange(ctx, tx, scopeID, version, true)
		})
}

// latestSQL selects the latest version of live scopes: the row scope_heads points at,
// unless scope_deletions has the scope deleted at that version or a later one.
const latestSQL = `SELECT v.scope_id, v.version, v.deploy_ver, v.config_json, v.created_at
	FROM scope_heads AS h
	JOIN scope_versions AS v ON v.scope_id = h.scope_id AND v.version = h.version
	WHERE NOT EXISTS (SELECT 1 FROM scope_deletions AS d WHERE d.scope_id = h.scope_id AND d.version >= h.version)`

// historySQL selects one page of a scope's history: the primary key's index read
// backwards from the version before, LIMIT rows of it.
const historySQL = `SELECT scope_id, version, deploy_ver, config_json, created_at
	FROM scope_versions WHERE scope_id = $1 AND version < $2 ORDER BY version DESC LIMIT $3`

// reader is the store's sqlstore.Reader, in PostgreSQL's dialect.
func reader(db *sql.DB) sqlstore.Reader {
	return sqlstore.NewReader(db, failure, sqlstore.Queries{
		Get:     latestSQL + ` AND h.scope_id = $1`,
		List:    latestSQL + ` ORDER BY h.scope_id`,
		History: historySQL,
		Exists:  `SELECT 1 FROM scope_heads WHERE scope_id = $1`,
	})
}

// failure classifies a database error of op (sqlstore.Failure): a PostgreSQL error
// about the statement itself (a constraint, a missing table) is INTERNAL; connection,
// rollback, resource and shutdown errors are STORE_UNAVAILABLE.
func failure(ctx context.Context, op string, err error) error {
	return sqlstore.Failure(ctx, op, err, func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !transient(pgErr.Code) {
			return pgErr
		}
		return nil
	})
}

// transient reports whether an SQLSTATE says the server could not do the work now
// rather than that the work is wrong: connection exceptions (08), transaction
// rollbacks such as deadlocks (40), insufficient resources such as too many
// connections (53), operator intervention such as a shutdown (57) and system errors
// (58).
func transient(code string) bool {
	if len(code) != 5 {
		return true
	}
	switch code[:2] {
	case "08", "40", "53", "57", "58":
		return true
	}
	return false
}

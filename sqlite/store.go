// Package sqlite is the config store: scope configs in SQLite (modernc.org/sqlite, no
// cgo) through database/sql. Every Put is a new row, so the history of a scope is kept.
//
// Several replicas may open one database file at once. Writes take the write lock up
// front (BEGIN IMMEDIATE) and wait for it under busy_timeout, so concurrent writers
// queue instead of failing with SQLITE_BUSY, and a new version number is always the
// previous maximum + 1 of its scope.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/sqlstore"
)

// BusyTimeout is how long a connection waits for a lock another connection (or
// process) holds before SQLite gives up with SQLITE_BUSY. A DSN that sets its own
// busy_timeout keeps it.
const BusyTimeout = 5 * time.Second

// Store is a warmpool.ConfigStore on SQLite. It is safe for concurrent use.
type Store struct {
	db              *sql.DB
	sqlstore.Reader // Get, List, History, Close
	// GetTenant, ListTenants; tenants.go writes.
	sqlstore.TenantReader
	// writeSem lets one write transaction of this process at a time wait for the
	// SQLite write lock: goroutines then queue fairly here instead of all polling the
	// lock under busy_timeout, where one of them could starve until it times out.
	writeSem chan struct{}
	feed     sqlstore.Feed
}

var (
	_ warmpool.ConfigStore = (*Store)(nil)
	_ warmpool.ConfigFeed  = (*Store)(nil)
)

// writeTurn waits for this process's turn to write (writeSem), or for ctx to end, and
// returns what gives the turn back.
func (s *Store) writeTurn(ctx context.Context, op string) (release func(), err error) {
	select {
	case s.writeSem <- struct{}{}:
		return func() { <-s.writeSem }, nil
	case <-ctx.Done():
		return nil, failure(ctx, op, ctx.Err())
	}
}

// Open opens (creating it if need be) and migrates the database named by dsn: a file
// path such as "warmpool.db", a "file:" URI, or ":memory:". Unless the DSN sets them
// itself, it turns on WAL (files only), busy_timeout and foreign keys; it always makes
// write transactions BEGIN IMMEDIATE. An in-memory database uses a single connection,
// since every connection to ":memory:" would otherwise get a database of its own.
// Errors: STORE_UNAVAILABLE, or ctx.Err().
func Open(ctx context.Context, dsn string) (*Store, error) {
	full, memory, err := buildDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", full)
	if err != nil {
		return nil, failure(ctx, "open", err)
	}
	if memory {
		db.SetMaxOpenConns(1)
		// The database lives as long as its one connection: never let it be recycled.
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
	}
	s := &Store{db: db, Reader: reader(db), TenantReader: tenantReader(db), writeSem: make(chan struct{}, 1),
		feed: sqlstore.NewFeed(db, failure, feedSince, lastSeq)}
	if err := connect(ctx, db); err != nil {
		_ = db.Close() // the open's error is the one to report
		return nil, failure(ctx, "open", err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close() // the migration's error is the one to report
		return nil, err
	}
	return s, nil
}

// connect opens db's first connection. Turning a new file to WAL can meet another
// process doing the same and answer SQLITE_BUSY without waiting busy_timeout, so a
// busy first connection is tried again until BusyTimeout has passed.
func connect(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(BusyTimeout)
	for {
		err := db.PingContext(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// buildDSN adds the driver parameters the store relies on to dsn and reports whether
// it names an in-memory database.
func buildDSN(dsn string) (string, bool, error) {
	if strings.TrimSpace(dsn) == "" {
		return "", false, errors.New("sqlite: empty DSN")
	}
	path, query, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", false, fmt.Errorf("sqlite: DSN %q: %w", dsn, err)
	}
	memory := path == ":memory:" || strings.HasPrefix(path, "file::memory:") ||
		strings.EqualFold(q.Get("mode"), "memory")

	// A deferred transaction that reads before it writes fails with an SQLITE_BUSY
	// that busy_timeout does not retry once another writer commits first: refuse
	// anything but immediate.
	if v := q.Get("_txlock"); v != "" && !strings.EqualFold(v, "immediate") {
		return "", false, fmt.Errorf("sqlite: DSN %q: _txlock=%s is not supported; the store needs immediate", dsn, v)
	}
	add := url.Values{}
	if !q.Has("_txlock") {
		add.Set("_txlock", "immediate")
	}
	if !hasSetting(q, "busy_timeout", "_busy_timeout", "_timeout") {
		add.Set("_busy_timeout", strconv.FormatInt(BusyTimeout.Milliseconds(), 10))
	}
	if !hasSetting(q, "foreign_keys", "_foreign_keys", "_fk") {
		add.Set("_foreign_keys", "1")
	}
	// WAL lets readers run beside the writer, also across processes; it does not
	// apply to a database in memory.
	if !memory && !hasSetting(q, "journal_mode", "_journal_mode", "_journal") {
		add.Set("_journal_mode", "WAL")
	}
	sep := "?"
	switch {
	case strings.HasSuffix(dsn, "?") || strings.HasSuffix(dsn, "&"):
		sep = ""
	case strings.Contains(dsn, "?"):
		sep = "&"
	}
	return dsn + sep + add.Encode(), memory, nil
}

// hasSetting reports whether the DSN query sets the pragma, by a shorthand key or by
// a _pragma value.
func hasSetting(q url.Values, pragma string, keys ...string) bool {
	for _, k := range keys {
		if _, ok := q[k]; ok {
			return true
		}
	}
	for _, v := range q["_pragma"] {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(v)), pragma) {
			return true
		}
	}
	return false
}

// Put stores cfg, which must be normalized (warmpool.ScopeConfig.Normalize), as the
// scope's next version; the store fills no default and keeps cfg as given.
// Errors: VALIDATION (a bad scope id), STORE_UNAVAILABLE, or ctx.Err().
func (s *Store) Put(ctx context.Context, scopeID string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, error) {
	stored, doc, err := sqlstore.NewVersion(scopeID, cfg)
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	op := fmt.Sprintf("put %q", scopeID)

	release, err := s.writeTurn(ctx, op)
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	defer release()

	// BEGIN IMMEDIATE (the DSN's _txlock): the write lock is held from the first read,
	// so the max version cannot change between reading it and inserting after it.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	defer tx.Rollback() // no-op after Commit
	err = tx.QueryRowContext(ctx, `
		INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
		SELECT ?1, COALESCE(MAX(version), 0) + 1, ?2, ?3, ?4
		FROM scope_versions WHERE scope_id = ?1
		RETURNING version`,
		scopeID, stored.DeployVer, string(doc), stored.UpdatedAt.UnixMilli(),
	).Scan(&stored.Version)
	if err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	if err := recordChange(ctx, tx, scopeID, stored.Version, false); err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return warmpool.StoredConfig{}, failure(ctx, op, err)
	}
	return stored, nil
}

// recordChange numbers a write of the scope in tx as the next change of the feed
// (lastSeq + 1). The transaction holds the write lock (BEGIN IMMEDIATE), so the
// number cannot move before it commits.
func recordChange(ctx context.Context, tx *sql.Tx, scopeID string, version int64, deleted bool) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO scope_changes (scope_id, seq, version, deleted) VALUES (?1, (`+lastSeq+`) + 1, ?2, ?3)
		ON CONFLICT (scope_id) DO UPDATE SET seq = excluded.seq, version = excluded.version, deleted = excluded.deleted`,
		scopeID, version, deleted)
	return err
}

// FeedPoll is how often Follow reads the change table: one indexed read of the rows
// past the last change seen, empty while nothing changes.
const FeedPoll = time.Second

// Follow calls fn with the changes committed from the call on by any process sharing
// the database (warmpool.ConfigFeed), read every FeedPoll.
func (s *Store) Follow(ctx context.Context, fn func(context.Context, []warmpool.ConfigChange) error) error {
	return s.feed.Poll(ctx, FeedPoll, fn)
}

// Delete marks the scope deleted at its latest version (warmpool.ConfigStore).
// Errors: SCOPE_NOT_FOUND (unknown, or deleted already), STORE_UNAVAILABLE, or
// ctx.Err().
func (s *Store) Delete(ctx context.Context, scopeID string) (warmpool.StoredConfig, error) {
	release, err := s.writeTurn(ctx, fmt.Sprintf("delete %q", scopeID))
	if err != nil {
		return warmpool.StoredConfig{}, err
	}
	defer release()
	// BEGIN IMMEDIATE (the DSN's _txlock) locks the database from the first read: no
	// Put of the scope comes between reading its latest version and marking it.
	return s.Reader.Delete(ctx, scopeID, "", func(ctx context.Context, tx *sql.Tx, scopeID string, version int64) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO scope_deletions (scope_id, version) VALUES (?1, ?2)
			ON CONFLICT (scope_id) DO UPDATE SET version = excluded.version`, scopeID, version); err != nil {
			return err
		}
		return recordChange(ctx, tx, scopeID, version, true)
	})
}

const selectColumns = `scope_id, version, deploy_ver, config_json, created_at`

// live keeps the rows of s (scope_versions) that are not deleted: a scope is deleted
// while its scope_deletions row is at its latest version or later.
const live = `NOT EXISTS (SELECT 1 FROM scope_deletions AS d WHERE d.scope_id = s.scope_id AND d.version >= s.version)`

// listSQL selects the latest row of every scope. The grouped sub-query reads only the
// primary key index (not the config documents of old versions); each latest row is
// then one index look-up.
const listSQL = `SELECT s.scope_id, s.version, s.deploy_ver, s.config_json, s.created_at
	FROM (SELECT scope_id, MAX(version) AS version FROM scope_versions GROUP BY scope_id) AS m
	JOIN scope_versions AS s ON s.scope_id = m.scope_id AND s.version = m.version
	WHERE ` + live + `
	ORDER BY s.scope_id`

// historySQL selects one page of a scope's history: the primary key's index read
// backwards from the version before, LIMIT rows of it.
const historySQL = `SELECT ` + selectColumns + ` FROM scope_versions
	WHERE scope_id = ?1 AND version < ?2 ORDER BY version DESC LIMIT ?3`

// reader is the store's sqlstore.Reader, in SQLite's dialect.
func reader(db *sql.DB) sqlstore.Reader {
	return sqlstore.NewReader(db, failure, sqlstore.Queries{
		Get:     `SELECT ` + selectColumns + ` FROM scope_versions AS s WHERE scope_id = ? AND ` + live + ` ORDER BY version DESC LIMIT 1`,
		List:    listSQL,
		History: historySQL,
		Exists:  `SELECT 1 FROM scope_versions WHERE scope_id = ? LIMIT 1`,
	})
}

// failure classifies a database error of op (sqlstore.Failure): anything but the
// caller's cancellation or an unreadable row is STORE_UNAVAILABLE.
func failure(ctx context.Context, op string, err error) error {
	return sqlstore.Failure(ctx, op, err, nil)
}

// Package sqlstore holds what the SQL config stores (sqlite, postgres) share: the
// errors they answer with, the versions they write and the rows they read.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/warmpool/warmpool"
)

// NotFound is the SCOPE_NOT_FOUND error of a scope with no stored config.
func NotFound(scopeID string) error {
	return warmpool.Errorf(warmpool.CodeScopeNotFound, "scope %q has no config", scopeID)
}

// CorruptError is a stored row the store cannot read back: a bug or a hand edit, not
// an outage, so Failure makes it INTERNAL.
type CorruptError struct {
	ScopeID string
	Version int64
	Err     error
	// Tenant is set when ScopeID names a tenant, whose quotas the row holds.
	Tenant bool
}

func (e *CorruptError) Error() string {
	kind := "scope"
	if e.Tenant {
		kind = "tenant"
	}
	return fmt.Sprintf("%s %q version %d: stored config is not readable: %v", kind, e.ScopeID, e.Version, e.Err)
}

// unavailableError is a STORE_UNAVAILABLE *warmpool.Error that also unwraps to the
// database error behind it, for errors.Is and logs.
type unavailableError struct {
	domain *warmpool.Error
	cause  error
}

func (e *unavailableError) Error() string   { return e.domain.Error() }
func (e *unavailableError) Unwrap() []error { return []error{e.domain, e.cause} }

// Failure classifies a database error of op: the caller's cancellation passes through
// as ctx.Err(); a *CorruptError, or an error that statement (may be nil) picks out as
// wrong in itself (a constraint, a missing table: a retry would not mend it), is
// INTERNAL; anything else (no connection, the server shutting down or busy) is
// STORE_UNAVAILABLE.
func Failure(ctx context.Context, op string, err error, statement func(error) error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("config store: %s: %w", op, ctxErr)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("config store: %s: %w", op, err)
	}
	var corrupt *CorruptError
	if errors.As(err, &corrupt) {
		return fmt.Errorf("config store: %s: %w", op, warmpool.Errorf(warmpool.CodeInternal, "%v", corrupt))
	}
	if statement != nil {
		if bad := statement(err); bad != nil {
			return fmt.Errorf("config store: %s: %w", op, warmpool.Errorf(warmpool.CodeInternal, "%v", bad))
		}
	}
	return &unavailableError{
		domain: &warmpool.Error{
			Code:       warmpool.CodeStoreUnavailable,
			Message:    fmt.Sprintf("config store: %s: %v", op, err),
			RetryAfter: 1,
		},
		cause: err,
	}
}

// NewVersion checks scopeID and encodes cfg (normalized; the store fills no default)
// for a Put: the config to store, with the write time at the millisecond a read gives
// back, and its JSON document. The store sets the version. Errors: VALIDATION (a bad
// scope id), INTERNAL (cfg does not encode).
func NewVersion(scopeID string, cfg warmpool.ScopeConfig) (warmpool.StoredConfig, []byte, error) {
	if err := warmpool.CheckScopeID(scopeID); err != nil {
		return warmpool.StoredConfig{}, nil, err
	}
	doc, err := json.Marshal(cfg)
	if err != nil {
		return warmpool.StoredConfig{}, nil, warmpool.Errorf(warmpool.CodeInternal, "config store: encode %q: %v", scopeID, err)
	}
	return warmpool.StoredConfig{
		ScopeID:   scopeID,
		DeployVer: cfg.Deploy.DeployVer(),
		Config:    cfg,
		UpdatedAt: time.UnixMilli(time.Now().UnixMilli()).UTC(),
	}, doc, nil
}

// Reader reads stored configs for a store, which embeds it: each store gives its
// database, how it classifies errors, and its queries in its dialect (NewReader).
type Reader struct {
	db      *sql.DB
	failure func(ctx context.Context, op string, err error) error
	q       Queries
}

// Queries are a store's read queries, in its dialect. Get, List and History select
// scope_id, version, deploy_ver, config_json and created_at (a timestamp, or unix
// milliseconds).
type Queries struct {
	// Get selects the latest version of the scope given as its one argument, List the
	// latest version of every scope by scope id; both leave out a deleted scope (one
	// whose latest version is no newer than its scope_deletions row).
	Get, List string
	// History selects the versions of the scope given (argument 1) older than
	// argument 2, newest first, at most argument 3: one range of the primary key
	// index, read backwards.
	History string
	// Exists selects a row when the scope given has any version.
	Exists string
}

// NewReader returns the Reader of a store on db. failure classifies database errors.
func NewReader(db *sql.DB, failure func(ctx context.Context, op string, err error) error, q Queries) Reader {
	return Reader{db: db, failure: failure, q: q}
}

// Close closes the database. Calls on a closed store fail with STORE_UNAVAILABLE.
func (r *Reader) Close() error {
	return r.db.Close()
}

// Get returns the latest version of the scope. Errors: SCOPE_NOT_FOUND,
// STORE_UNAVAILABLE, or ctx.Err().
func (r *Reader) Get(ctx context.Context, scopeID string) (warmpool.StoredConfig, error) {
	sc, err := scanConfig(r.db.QueryRowContext(ctx, r.q.Get, scopeID))
	if errors.Is(err, sql.ErrNoRows) {
		return warmpool.StoredConfig{}, NotFound(scopeID)
	}
	if err != nil {
		return warmpool.StoredConfig{}, r.failure(ctx, fmt.Sprintf("get %q", scopeID), err)
	}
	return sc, nil
}

// Delete marks the scope deleted at its latest version, in one transaction: lock,
// unless empty, runs first with the scope id as its argument, to keep a concurrent Put
// of the scope out until the commit (a store whose transactions lock the whole
// database passes ""); then the latest version of the live scope is read with the
// Reader's get query, and mark runs in the transaction with the scope id and that
// version. It returns the version deleted. Errors: SCOPE_NOT_FOUND, what the store's
// failure makes of a database error, or ctx.Err().
func (r *Reader) Delete(ctx context.Context, scopeID, lock string, mark func(ctx context.Context, tx *sql.Tx, scopeID string, version int64) error) (warmpool.StoredConfig, error) {
	op := fmt.Sprintf("delete %q", scopeID)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return warmpool.StoredConfig{}, r.failure(ctx, op, err)
	}
	defer tx.Rollback() // no-op after Commit
	if lock != "" {
		if _, err := tx.ExecContext(ctx, lock, scopeID); err != nil {
			return warmpool.StoredConfig{}, r.failure(ctx, op, err)
		}
	}
	sc, err := scanConfig(tx.QueryRowContext(ctx, r.q.Get, scopeID))
	if errors.Is(err, sql.ErrNoRows) {
		return warmpool.StoredConfig{}, NotFound(scopeID)
	}
	if err != nil {
		return warmpool.StoredConfig{}, r.failure(ctx, op, err)
	}
	if err := mark(ctx, tx, scopeID, sc.Version); err != nil {
		return warmpool.StoredConfig{}, r.failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return warmpool.StoredConfig{}, r.failure(ctx, op, err)
	}
	return sc, nil
}

// List returns the latest version of every scope, by scope id; an empty store gives
// an empty, non-nil slice. Errors: STORE_UNAVAILABLE, or ctx.Err().
func (r *Reader) List(ctx context.Context) ([]warmpool.StoredConfig, error) {
	return r.query(ctx, "list", r.q.List)
}

// History returns one page of the scope's versions, newest first
// (warmpool.ConfigStore). Errors: VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE, or
// ctx.Err().
func (r *Reader) History(ctx context.Context, scopeID string, q warmpool.HistoryQuery) (warmpool.HistoryPage, error) {
	if err := q.Check(); err != nil {
		return warmpool.HistoryPage{}, err
	}
	op := fmt.Sprintf("history %q", scopeID)
	page, err := r.page(ctx, scopeID, q)
	if err != nil {
		return warmpool.HistoryPage{}, r.failure(ctx, op, err)
	}
	if len(page.Versions) > 0 {
		return page, nil
	}
	if q.Before != 0 {
		// A page past the oldest version of a scope is empty; an unknown scope is not
		// found.
		err := r.db.QueryRowContext(ctx, r.q.Exists, scopeID).Scan(new(int))
		if err == nil {
			return page, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return warmpool.HistoryPage{}, r.failure(ctx, op, err)
		}
	}
	return warmpool.HistoryPage{}, NotFound(scopeID)
}

// page reads the page q of the scope's history; its rows are closed when it returns
// (an in-memory SQLite database has one connection, which the next query needs).
func (r *Reader) page(ctx context.Context, scopeID string, q warmpool.HistoryQuery) (warmpool.HistoryPage, error) {
	before := q.Before
	if before == 0 {
		before = math.MaxInt64
	}
	// One row more than the page tells whether older versions remain; it is not
	// decoded.
	rows, err := r.db.QueryContext(ctx, r.q.History, scopeID, before, q.Limit+1)
	if err != nil {
		return warmpool.HistoryPage{}, err
	}
	defer rows.Close()
	page := warmpool.HistoryPage{Versions: make([]warmpool.StoredConfig, 0, min(q.Limit, 64))}
	for rows.Next() {
		if len(page.Versions) == q.Limit {
			page.NextBefore = page.Versions[q.Limit-1].Version
			break
		}
		sc, err := scanConfig(rows)
		if err != nil {
			return warmpool.HistoryPage{}, err
		}
		page.Versions = append(page.Versions, sc)
	}
	return page, rows.Err()
}

func (r *Reader) query(ctx context.Context, op, query string, args ...any) ([]warmpool.StoredConfig, error) {
	rows, err := r.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, r.failure(ctx, op, err)
	}
	defer rows.Close()
	out := []warmpool.StoredConfig{}
	for rows.Next() {
		sc, err := scanConfig(rows)
		if err != nil {
			return nil, r.failure(ctx, op, err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, r.failure(ctx, op, err)
	}
	return out, nil
}

// scanConfig reads one row of a Reader query.
func scanConfig(row interface{ Scan(...any) error }) (warmpool.StoredConfig, error) {
	var (
		sc      warmpool.StoredConfig
		doc     []byte
		created timestamp
	)
	if err := row.Scan(&sc.ScopeID, &sc.Version, &sc.DeployVer, &doc, &created); err != nil {
		return warmpool.StoredConfig{}, err
	}
	// Rows are normalized when written; LoadScopeConfig also gives a row written
	// before a field existed that field's default, not a zero.
	cfg, err := warmpool.LoadScopeConfig(doc)
	if err != nil {
		return warmpool.StoredConfig{}, &CorruptError{ScopeID: sc.ScopeID, Version: sc.Version, Err: err}
	}
	sc.Config = cfg
	sc.UpdatedAt = time.Time(created).UTC()
	return sc, nil
}

// timestamp reads created_at: a timestamp (PostgreSQL) or unix milliseconds (SQLite).
type timestamp time.Time

func (t *timestamp) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		*t = timestamp(v)
	case int64:
		*t = timestamp(time.UnixMilli(v))
	default:
		return fmt.Errorf("created_at: want a timestamp or unix milliseconds, got %T", v)
	}
	return nil
}

// FeedPage is the most changes one read of a store's change table takes, and hands
// to the follower in one batch.
const FeedPage = 1000

// Feed reads a store's change tables (scope_changes and tenant_changes: each scope's
// and each tenant's latest write, under the number of the change it was committed
// as, one sequence for both), for the store's warmpool.ConfigFeed.
// The store numbers its writes in commit order, so a read of the changes past the last
// number seen never leaves one behind it.
type Feed struct {
	db      *sql.DB
	failure func(ctx context.Context, op string, err error) error
	since   string
	head    string
}

// NewFeed returns the Feed of a store on db. since selects seq, scope_id, tenant_id,
// version and deleted of the changes numbered past argument 1, by number, at most
// argument 2 (one of the ids is empty: a scope's change or a tenant's); head selects
// the number of the latest change (0 when there is none).
func NewFeed(db *sql.DB, failure func(ctx context.Context, op string, err error) error, since, head string) Feed {
	return Feed{db: db, failure: failure, since: since, head: head}
}

// Head returns the number of the latest change committed. Errors: STORE_UNAVAILABLE,
// or ctx.Err().
func (f Feed) Head(ctx context.Context) (int64, error) {
	var seq int64
	if err := f.db.QueryRowContext(ctx, f.head).Scan(&seq); err != nil {
		return 0, f.failure(ctx, "feed head", err)
	}
	return seq, nil
}

// Deliver hands fn every change committed past *seq, a page at a time, oldest first,
// and moves *seq past each page fn took. It returns the first error, fn's or the
// store's: the changes from that page on come at the next call.
func (f Feed) Deliver(ctx context.Context, seq *int64, fn func(context.Context, []warmpool.ConfigChange) error) error {
	for {
		page, last, err := f.read(ctx, *seq)
		if err != nil {
			return f.failure(ctx, "feed", err)
		}
		if len(page) == 0 {
			return nil
		}
		if err := fn(ctx, page); err != nil {
			return err
		}
		*seq = last
		if len(page) < FeedPage {
			return nil
		}
	}
}

// read reads one page of changes past seq, and the number of its last one; its rows
// are closed when it returns (an in-memory SQLite database has one connection).
func (f Feed) read(ctx context.Context, seq int64) ([]warmpool.ConfigChange, int64, error) {
	rows, err := f.db.QueryContext(ctx, f.since, seq, FeedPage)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var page []warmpool.ConfigChange
	last := seq
	for rows.Next() {
		var c warmpool.ConfigChange
		if err := rows.Scan(&last, &c.ScopeID, &c.TenantID, &c.Version, &c.Deleted); err != nil {
			return nil, 0, err
		}
		page = append(page, c)
	}
	return page, last, rows.Err()
}

// Poll follows the feed by reading it every interval (warmpool.ConfigFeed.Follow, for
// a store with no way to be told of a commit): from the latest change when it is
// first read, until ctx ends. A read that fails is tried again at the next interval.
func (f Feed) Poll(ctx context.Context, every time.Duration, fn func(context.Context, []warmpool.ConfigChange) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	seq, started := int64(0), false
	for {
		if !started {
			head, err := f.Head(ctx)
			seq, started = head, err == nil
		} else {
			_ = f.Deliver(ctx, &seq, fn) // fn logs its own errors; the store's wait for the next interval
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

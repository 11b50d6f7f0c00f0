// Package sqlstore holds what the SQL config stores (sqlite, postgres) share: the
// errors they answer with and the bookkeeping of applied migrations.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("scope %q version %d: stored config is not readable: %v", e.ScopeID, e.Version, e.Err)
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

// Applied returns the migration versions recorded in tx's schema_migrations table.
func Applied(ctx context.Context, tx *sql.Tx) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[string]bool{}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// Scanner is a row to read: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(...any) error }

// Query runs query on db and reads every row with scan; errors come back as the
// database gave them, for the store's Failure.
func Query(ctx context.Context, db *sql.DB, scan func(Scanner) (warmpool.StoredConfig, error), query string, args ...any) ([]warmpool.StoredConfig, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []warmpool.StoredConfig{}
	for rows.Next() {
		sc, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, rows.Err()
}

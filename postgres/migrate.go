package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/warmpool/warmpool/internal/sqlmigrate"
)

// The schema, one file a step, run in number order, each at most once per schema, as
// recorded in schema_migrations.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the key of the transaction-scoped advisory lock that replicas
// starting together take before migrating: the later one waits, then finds the steps
// recorded and applies nothing. (Two CREATE TABLE IF NOT EXISTS of one table at once
// can otherwise fail on a unique index of the catalog.)
const migrationLock = 0x77_61_72_6d_70_6f_6f_6c // "warmpool"

// migrate applies every pending migration in one transaction: all of them or none.
func (s *Store) migrate(ctx context.Context) error {
	steps, err := sqlmigrate.Load(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: read migrations: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return failure(ctx, "migrate", err)
	}
	defer tx.Rollback() // no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return failure(ctx, "migrate", err)
	}
	if op, err := sqlmigrate.Apply(ctx, tx, steps, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT        NOT NULL PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`, `INSERT INTO schema_migrations (version) VALUES ($1)`); err != nil {
		return failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return failure(ctx, "migrate", err)
	}
	return nil
}

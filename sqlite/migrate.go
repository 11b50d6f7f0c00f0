package sqlite

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/warmpool/warmpool/internal/sqlmigrate"
)

// The schema, one file a step. Files run in name order (hence the 4-digit prefix),
// each at most once per database, as recorded in schema_migrations.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrate applies every pending migration in one write transaction. BEGIN IMMEDIATE
// makes replicas that start together take turns: the later one finds the steps
// recorded and applies nothing.
func (s *Store) migrate(ctx context.Context) error {
	steps, err := sqlmigrate.Load(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: read migrations: %w", err)
	}
	release, err := s.writeTurn(ctx, "migrate")
	if err != nil {
		return err
	}
	defer release()

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return failure(ctx, "migrate", err)
	}
	defer tx.Rollback() // no-op after Commit
	if op, err := sqlmigrate.Apply(ctx, tx, steps, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT    NOT NULL PRIMARY KEY,
		applied_at INTEGER NOT NULL -- unix milliseconds
	) STRICT`, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, time.Now().UnixMilli()); err != nil {
		return failure(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return failure(ctx, "migrate", err)
	}
	return nil
}

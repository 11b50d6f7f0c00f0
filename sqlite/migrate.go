package sqlite

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/warmpool/warmpool/internal/sqlmigrate"
	"github.com/warmpool/warmpool/internal/sqlstore"
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
	select {
	case s.writeSem <- struct{}{}:
	case <-ctx.Done():
		return failure(ctx, "migrate", ctx.Err())
	}
	defer func() { <-s.writeSem }()

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return failure(ctx, "migrate", err)
	}
	defer tx.Rollback() // no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT    NOT NULL PRIMARY KEY,
		applied_at INTEGER NOT NULL -- unix milliseconds
	) STRICT`); err != nil {
		return failure(ctx, "migrate", err)
	}
	applied, err := sqlstore.Applied(ctx, tx)
	if err != nil {
		return failure(ctx, "migrate", err)
	}
	now := time.Now().UnixMilli()
	for _, m := range steps {
		if applied[m.Version] {
			continue
		}
		op := "migrate " + m.Version
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return failure(ctx, op, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, m.Version, now); err != nil {
			return failure(ctx, op, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return failure(ctx, "migrate", err)
	}
	return nil
}

// Package sqlmigrate reads a config store's embedded schema migrations: one .sql file
// a step, named NNNN_words.sql and numbered 1, 2, 3 … with no gap, applied in that
// order. Each store applies them in its own dialect and records them in its
// schema_migrations table.
package sqlmigrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Step is one migration.
type Step struct {
	// Version is the file name without .sql, e.g. "0001_scope_versions"; it is what
	// schema_migrations records.
	Version string
	// SQL is the file's content.
	SQL string
}

var nameRe = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+$`)

// Load returns the *.sql files of dir in fsys in name order. A name that does not
// sort where its number says would silently reorder the schema, so a file not named
// NNNN_words.sql, a gap or a duplicate number, or no file at all is an error.
func Load(fsys fs.FS, dir string) ([]Step, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql")) // sorted by name
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("migrations: no .sql file in %s", dir)
	}
	steps := make([]Step, 0, len(names))
	for i, name := range names {
		version := strings.TrimSuffix(path.Base(name), ".sql")
		sub := nameRe.FindStringSubmatch(version)
		if sub == nil {
			return nil, fmt.Errorf("migration %q: name must be NNNN_words.sql", name)
		}
		if n, _ := strconv.Atoi(sub[1]); n != i+1 {
			return nil, fmt.Errorf("migration %q is number %d, want %04d: numbers run 1, 2, 3 with no gap", name, n, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		steps = append(steps, Step{Version: version, SQL: string(b)})
	}
	return steps, nil
}

// Apply runs in tx every step that schema_migrations does not record yet, in order,
// and records each one with record, a statement whose arguments are the version and
// then args. createTable makes schema_migrations when it is missing. On an error it
// returns the operation that failed ("migrate" or "migrate VERSION") with the
// database's error, for the store to classify; the caller commits tx.
func Apply(ctx context.Context, tx *sql.Tx, steps []Step, createTable, record string, args ...any) (op string, err error) {
	if _, err := tx.ExecContext(ctx, createTable); err != nil {
		return "migrate", err
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return "migrate", err
	}
	for _, m := range steps {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return "migrate " + m.Version, err
		}
		if _, err := tx.ExecContext(ctx, record, append([]any{m.Version}, args...)...); err != nil {
			return "migrate " + m.Version, err
		}
	}
	return "", nil
}

// appliedVersions returns the versions recorded in tx's schema_migrations table.
func appliedVersions(ctx context.Context, tx *sql.Tx) (map[string]bool, error) {
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

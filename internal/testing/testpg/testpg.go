// Package testpg gives tests a PostgreSQL database: the server named by
// WARMPOOL_TEST_POSTGRES (a DSN; make test sets it with scripts/with-postgres.sh), a
// schema of its own per call, so tests run in parallel on one server. Without the
// variable the tests that need it are skipped.
package testpg

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmpool/warmpool"
)

// EnvDSN names the environment variable that holds the test server's DSN.
const EnvDSN = "WARMPOOL_TEST_POSTGRES"

// ServerDSN returns the test server's DSN, skipping the test when none is set.
func ServerDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		tb.Skipf("%s is not set: run under scripts/with-postgres.sh (make test does)", EnvDSN)
	}
	return dsn
}

// DSN returns the DSN of a new, empty schema on the test server: its search_path
// parameter makes every client of the DSN, in this process or another, create and
// find its tables there. The schema is dropped when the test ends.
func DSN(tb testing.TB) string {
	tb.Helper()
	server := ServerDSN(tb)
	u, err := url.Parse(server)
	if err != nil {
		tb.Fatalf("%s: %v", EnvDSN, err)
	}
	schema := "t_" + warmpool.NewID()[:12]
	Exec(tb, server, `CREATE SCHEMA `+schema)
	tb.Cleanup(func() { Exec(tb, server, `DROP SCHEMA `+schema+` CASCADE`) })
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Exec runs one statement through a connection of its own to dsn.
func Exec(tb testing.TB, dsn, statement string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect to the test PostgreSQL: %v", err)
	}
	defer func() {
		if err := conn.Close(ctx); err != nil {
			tb.Error(err)
		}
	}()
	if _, err := conn.Exec(ctx, statement); err != nil {
		tb.Fatalf("%s: %v", statement, err)
	}
}

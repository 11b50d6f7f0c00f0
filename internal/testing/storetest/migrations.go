package storetest

import (
	"context"
	"database/sql"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/sqlmigrate"
)

// Migrations checks that replicas starting together on a fresh database migrate it
// once: four opens at once succeed, schema_migrations then records each migration of
// fsys's migrations folder once, migrating again applies nothing, and the data written
// before stays readable. open opens the same database each time and is called from
// several goroutines; db is the store's database handle, migrate its migration run.
func Migrations[S warmpool.ConfigStore](t *testing.T, fsys fs.FS, open func() (S, error), db func(S) *sql.DB, migrate func(S, context.Context) error) {
	steps, err := sqlmigrate.Load(fsys, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := open()
			if err != nil {
				t.Error(err)
				return
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	s := mustOpenSQL(t, open)
	put := Put(t, s, "scope", Config(t, `{}`))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpenSQL(t, open)
	var count int
	if err := db(s).QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != len(steps) {
		t.Errorf("schema_migrations has %d rows, want %d (one per migration)", count, len(steps))
	}
	if err := migrate(s, ctx); err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	got, err := s.Get(ctx, "scope")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, put) {
		t.Errorf("after reopen Get = %+v, want %+v", got, put)
	}
}

func mustOpenSQL[S warmpool.ConfigStore](t *testing.T, open func() (S, error)) S {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() }) // the test may have closed it already
	return s
}

// OldRows checks how s reads rows written by hand with insert (version 1, deploy_ver
// "dv"): a row written before a field existed gets that field's default, not a zero,
// and a row that is not a valid config is INTERNAL (a bug or a hand edit), not an
// outage.
func OldRows(t *testing.T, s warmpool.ConfigStore, insert func(t *testing.T, scope, doc string)) {
	ctx := context.Background()
	insert(t, "old", `{"deploy":{"image":"agent:1","command":null},"pool":{"pod_concurrency":1}}`)
	got, err := s.Get(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	want := Config(t, `{"deploy":{"image":"agent:1"},"pool":{"pod_concurrency":1}}`)
	if !reflect.DeepEqual(got.Config, want) {
		t.Fatalf("old row read as %+v\nwant %+v", got.Config, want)
	}
	if got.DeployVer != "dv" {
		t.Errorf("deploy_ver %q, want the stored dv", got.DeployVer)
	}

	insert(t, "bad", `{"deploy":{"port":0}}`)
	_, err = s.Get(ctx, "bad")
	WantCode(t, err, warmpool.CodeInternal)
	if !strings.Contains(err.Error(), "deploy.port") {
		t.Errorf("error %q does not name deploy.port", err)
	}
}

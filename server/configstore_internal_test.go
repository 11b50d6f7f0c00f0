package server

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/sqlite"
)

func TestParseStore(t *testing.T) {
	for _, tc := range []struct{ spec, kind, dsn string }{
		{"warmpool.db", storeSQLite, "warmpool.db"},
		{"/var/lib/warmpool/config.db", storeSQLite, "/var/lib/warmpool/config.db"},
		{"file:/x/wp.db?mode=rwc", storeSQLite, "file:/x/wp.db?mode=rwc"},
		{":memory:", storeSQLite, ":memory:"},
		{"sqlite://warmpool.db", storeSQLite, "warmpool.db"},
		{"sqlite:///var/lib/wp.db", storeSQLite, "/var/lib/wp.db"},
		{"SQLite://wp.db", storeSQLite, "wp.db"},
		{"postgres://wp:pw@db:5432/wp?sslmode=require", storePostgres, "postgres://wp:pw@db:5432/wp?sslmode=require"},
		{"postgresql://wp@db/wp", storePostgres, "postgresql://wp@db/wp"},
		{"POSTGRES://wp@db/wp", storePostgres, "POSTGRES://wp@db/wp"},
	} {
		kind, dsn := parseStore(tc.spec)
		if kind != tc.kind || dsn != tc.dsn {
			t.Errorf("parseStore(%q) = %s, %q; want %s, %q", tc.spec, kind, dsn, tc.kind, tc.dsn)
		}
	}
}

func TestOpenConfigStoreKinds(t *testing.T) {
	ctx := context.Background()
	st, err := openConfigStore(ctx, "sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	if _, ok := st.(*sqlite.Store); !ok {
		t.Errorf("sqlite://:memory: opened a %T", st)
	}
	// Nothing listens on a port just closed: the PostgreSQL store is tried, and its
	// error names the store without its password.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = openConfigStore(ctx, "postgres://wp:s3cret@"+addr+"/wp?sslmode=disable&connect_timeout=2")
	if code := warmpool.ErrorCode(err); code != warmpool.CodeStoreUnavailable {
		t.Fatalf("postgres store on a closed port: %v (code %s), want STORE_UNAVAILABLE", err, code)
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "postgres://wp:xxxxx@"+addr+"/wp") {
		t.Errorf("error %q: want the store named with its password redacted", err)
	}
}

func TestRedactStore(t *testing.T) {
	for spec, want := range map[string]string{
		"warmpool.db":                           "warmpool.db",
		"postgres://wp:pw@db/wp":                "postgres://wp:xxxxx@db/wp",
		"postgresql://wp@db/wp?sslmode=require": "postgresql://wp@db/wp?sslmode=require",
		"postgres://wp:pw@db:port/%zz":          "postgres://(unparsable URL)",
	} {
		if got := redactStore(spec); got != want {
			t.Errorf("redactStore(%q) = %q, want %q", spec, got, want)
		}
	}
}

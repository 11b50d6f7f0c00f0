package server

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/postgres"
	"github.com/warmpool/warmpool/sqlite"
)

// Config store kinds that --store names.
const (
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
)

// parseStore splits --store into the store kind and the DSN its driver takes:
// postgres://… and postgresql://… are PostgreSQL (the whole URL is the DSN);
// sqlite://FILE and a plain FILE (or SQLite DSN) are SQLite.
func parseStore(spec string) (kind, dsn string) {
	lower := strings.ToLower(spec)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return storePostgres, spec
	case strings.HasPrefix(lower, "sqlite://"):
		return storeSQLite, spec[len("sqlite://"):]
	default:
		return storeSQLite, spec
	}
}

// openConfigStore opens the config store spec names (see parseStore).
func openConfigStore(ctx context.Context, spec string) (warmpool.ConfigStore, error) {
	kind, dsn := parseStore(spec)
	var (
		st  warmpool.ConfigStore
		err error
	)
	if kind == storePostgres {
		st, err = postgres.Open(ctx, dsn)
	} else {
		st, err = sqlite.Open(ctx, dsn)
	}
	if err != nil {
		return nil, fmt.Errorf("config store %s: %w", redactStore(spec), err)
	}
	return st, nil
}

// redactStore is spec fit for a log line or an error: a URL's password is replaced
// by "xxxxx".
func redactStore(spec string) string {
	if kind, _ := parseStore(spec); kind != storePostgres {
		return spec
	}
	u, err := url.Parse(spec)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

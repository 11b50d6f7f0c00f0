package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/storetest"
	"github.com/warmpool/warmpool/internal/testing/testpg"
)

func mustOpen(tb testing.TB, dsn string) *Store { return storetest.MustOpen(tb, Open, dsn) }

func TestContract(t *testing.T) {
	storetest.Run(t, func(tb testing.TB) storetest.Opener {
		dsn := testpg.DSN(tb)
		return func(tb testing.TB) warmpool.ConfigStore { return mustOpen(tb, dsn) }
	})
}

// BenchmarkHistory: history pages of 10,000 versions (docs/performance.md).
func BenchmarkHistory(b *testing.B) { storetest.BenchmarkHistory(b, mustOpen(b, testpg.DSN(b))) }

// Replicas starting together on a fresh database migrate it once; a later start
// applies nothing and keeps the data.
func TestMigrationsIdempotent(t *testing.T) {
	dsn := testpg.DSN(t)
	storetest.Migrations(t, migrationFS, func() (*Store, error) { return Open(context.Background(), dsn) },
		func(s *Store) *sql.DB { return s.db }, (*Store).migrate)
}

// The row itself holds the defaults, so any other reader of the table sees them too.
func TestStoredRowHoldsDefaults(t *testing.T) {
	s := mustOpen(t, testpg.DSN(t))
	storetest.Put(t, s, "scope", storetest.Config(t, `{"deploy":{"image":"agent:1"}}`))
	var memory string
	err := s.db.QueryRowContext(context.Background(),
		`SELECT config_json #>> '{deploy,resources,memory}' FROM scope_versions`).Scan(&memory)
	if err != nil {
		t.Fatal(err)
	}
	if memory != warmpool.DefaultMemory {
		t.Errorf("stored memory = %q, want %q", memory, warmpool.DefaultMemory)
	}
}

// Rows are read back normalized: a row written before a field existed gets that
// field's default, not a zero, and a row that is not a valid config is INTERNAL (a bug
// or a hand edit), not an outage.
func TestLoadNormalizesOldRows(t *testing.T) {
	dsn := testpg.DSN(t)
	storetest.OldRows(t, mustOpen(t, dsn), func(t *testing.T, scope, doc string) {
		testpg.Exec(t, dsn, `INSERT INTO scope_heads (scope_id, version) VALUES ('`+scope+`', 1)`)
		testpg.Exec(t, dsn, `INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
			VALUES ('`+scope+`', 1, 'dv', '`+doc+`', now())`)
	})
}

// A writer waiting for the scope's row lock, which another replica holds, gives up
// when its caller does; writers of other scopes do not wait at all.
func TestPutWaitingForLockHonoursContext(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.DSN(t)
	holder, waiter := mustOpen(t, dsn), mustOpen(t, dsn)
	cfg := storetest.Config(t, `{}`)
	storetest.Put(t, holder, "scope", cfg)
	tx, err := holder.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM scope_heads WHERE scope_id = 'scope' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = waiter.Put(short, "scope", cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put while another store holds the row: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("Put waited %v, past its 200ms deadline", waited)
	}
	if got := storetest.Put(t, waiter, "other", cfg).Version; got != 1 {
		t.Errorf("Put of another scope beside the lock: version %d, want 1", got)
	}

	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Put(t, waiter, "scope", cfg).Version; got != 2 {
		t.Errorf("Put after the lock was released: version %d, want 2 (the cancelled Put must not use one up)", got)
	}
}

// The server dropping every connection (a restart, a failover) is an outage of one
// call at most per pooled connection, answered STORE_UNAVAILABLE (which callers
// retry); the pool then reconnects by itself.
func TestReconnectsAfterConnectionsDropped(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.DSN(t)
	admin := mustOpen(t, dsn)
	// Only this store's connections, told apart by their application_name: other
	// tests share the server.
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	app := "reconnect_" + q.Get("search_path")
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s := mustOpen(t, u.String())
	put := storetest.Put(t, s, "scope", storetest.Config(t, `{}`))
	var dropped int
	if err := admin.db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&dropped); err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Fatal("no connection of the store was found to drop")
	}
	var got warmpool.StoredConfig
	for range MaxOpenConns + 1 {
		if got, err = s.Get(ctx, "scope"); err == nil {
			break
		}
		storetest.WantCode(t, err, warmpool.CodeStoreUnavailable)
	}
	if err != nil {
		t.Fatalf("Get still fails after the server dropped the connections: %v", err)
	}
	if !reflect.DeepEqual(got, put) {
		t.Errorf("Get = %+v, want %+v", got, put)
	}
	if got := storetest.Put(t, s, "scope", storetest.Config(t, `{}`)).Version; got != 2 {
		t.Errorf("Put after reconnecting: version %d, want 2", got)
	}
}

// A table edited by hand into a state Put cannot extend is a bug to look at, not an
// outage to retry: INTERNAL, with the server's words.
func TestHandEditedTablesAreInternal(t *testing.T) {
	dsn := testpg.DSN(t)
	s := mustOpen(t, dsn)
	storetest.Put(t, s, "scope", storetest.Config(t, `{}`))
	testpg.Exec(t, dsn, `INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
		VALUES ('scope', 2, 'x', '{}', now())`)
	_, err := s.Put(context.Background(), "scope", storetest.Config(t, `{}`))
	storetest.WantCode(t, err, warmpool.CodeInternal)
	if !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("error %q hides the server's reason", err)
	}
}

// No server at the address: Open fails at once with STORE_UNAVAILABLE.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	start := time.Now()
	_, err = Open(context.Background(), "postgres://wp:secret@"+addr+"/wp?sslmode=disable")
	storetest.WantCode(t, err, warmpool.CodeStoreUnavailable)
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}
	if took := time.Since(start); took > ConnectTimeout {
		t.Errorf("Open took %v", took)
	}
}

func TestBadDSN(t *testing.T) {
	for _, dsn := range []string{"postgres://wp:secret@host:notaport/db", "postgres://wp:secret@host/db?sslmode=sometimes"} {
		_, err := Open(context.Background(), dsn)
		storetest.WantCode(t, err, warmpool.CodeValidation)
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

func TestTransient(t *testing.T) {
	for code, want := range map[string]bool{
		"08006": true,  // connection failure
		"40P01": true,  // deadlock detected
		"53300": true,  // too many connections
		"57P01": true,  // admin shutdown
		"23505": false, // unique violation
		"42P01": false, // undefined table
		"22P02": false, // invalid text representation
	} {
		if got := transient(code); got != want {
			t.Errorf("transient(%s) = %v, want %v", code, got, want)
		}
	}
}

// A history page reads its own rows and one more, backwards along the primary key's
// index, whatever the length of the history: 51 of 2,000 versions for a page of 50,
// as PostgreSQL counts them running the query (EXPLAIN ANALYZE) once it knows the
// table's size.
func TestHistoryReadsOnePage(t *testing.T) {
	dsn := testpg.DSN(t)
	s := mustOpen(t, dsn)
	testpg.Exec(t, dsn, `INSERT INTO scope_heads (scope_id, version) VALUES ('big', 2000)`)
	testpg.Exec(t, dsn, `INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
		SELECT 'big', v, 'dv', '{}', now() FROM generate_series(1, 2000) AS v`)
	testpg.Exec(t, dsn, `ANALYZE scope_versions`)
	for _, before := range []int64{math.MaxInt64, 1000} {
		var raw []byte
		if err := s.db.QueryRowContext(context.Background(), `EXPLAIN (ANALYZE, FORMAT JSON) `+historySQL, "big", before, 51).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("EXPLAIN: %v\n%s", err, raw)
		}
		if read := plans[0].Plan.rowsRead("scope_versions"); read != 51 {
			t.Errorf("a page of 50 before %d read %d rows of scope_versions, want 51:\n%s", before, read, raw)
		}
	}
}

// planNode is a node of a PostgreSQL query plan in EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Relation string     `json:"Relation Name"`
	Rows     int        `json:"Actual Rows"`
	Removed  int        `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// rowsRead is how many rows of table the plan's scans read: those they gave on and
// those their filters dropped.
func (n planNode) rowsRead(table string) int {
	read := 0
	if n.Relation == table {
		read = n.Rows + n.Removed
	}
	for _, c := range n.Plans {
		read += c.rowsRead(table)
	}
	return read
}

// The feed's listening connection, terminated by the server (pg_terminate_backend: a
// restart, a failover, an admin), reconnects, and a write committed while no
// connection listened (so its notification went to no one) is still delivered: the
// reconnect reads past the last change delivered.
func TestFeedReconnectDeliversMissed(t *testing.T) {
	dsn := testpg.DSN(t)
	s, writer := mustOpen(t, dsn), mustOpen(t, dsn)
	var (
		mu      sync.Mutex
		listens int
	)
	s.beforeListen = func() {
		mu.Lock()
		listens++
		n := listens
		mu.Unlock()
		if n == 2 {
			// Reconnected, not listening yet: the write's notification is lost.
			if _, err := writer.Put(context.Background(), "missed", storetest.Config(t, `{}`)); err != nil {
				t.Errorf("Put while the feed reconnects: %v", err)
			}
		}
	}
	log := storetest.Follow(t, s, writer)
	var pid int
	err := s.db.QueryRowContext(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %' || $2 || '%'`, feedApp, s.channel).Scan(&pid)
	if err != nil {
		t.Fatalf("the listening connection: %v", err)
	}
	testpg.Exec(t, dsn, `SELECT pg_terminate_backend(`+strconv.Itoa(pid)+`)`)
	await.True(t, storetest.FeedWithin, "the write made while reconnecting is delivered", func() bool {
		return log.Has(warmpool.ConfigChange{ScopeID: "missed", Version: 1})
	})
	mu.Lock()
	defer mu.Unlock()
	if listens != 2 {
		t.Errorf("the feed listened %d times, want 2 (one reconnect)", listens)
	}
}

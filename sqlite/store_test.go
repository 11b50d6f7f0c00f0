package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

func mustOpen(tb testing.TB, dsn string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("Open(%q): %v", dsn, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func fileDSN(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "warmpool.db")
}

// mustConfig decodes doc the way the HTTP layer does: defaults filled, validated.
func mustConfig(tb testing.TB, doc string) warmpool.ScopeConfig {
	tb.Helper()
	cfg, err := warmpool.DecodeScopeConfig(strings.NewReader(doc))
	if err != nil {
		tb.Fatalf("DecodeScopeConfig(%s): %v", doc, err)
	}
	return cfg
}

func mustPut(tb testing.TB, s *Store, scope string, cfg warmpool.ScopeConfig) warmpool.StoredConfig {
	tb.Helper()
	sc, err := s.Put(context.Background(), scope, cfg)
	if err != nil {
		tb.Fatalf("Put(%q): %v", scope, err)
	}
	return sc
}

func wantCode(tb testing.TB, err error, code warmpool.Code) {
	tb.Helper()
	if got := warmpool.ErrorCode(err); got != code {
		tb.Fatalf("error %v: code %s, want %s", err, got, code)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, dsn string }{
		{"memory", ":memory:"},
		{"file", fileDSN(t)},
		{"file URI", "file:" + fileDSN(t) + "?cache=private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := mustOpen(t, tc.dsn)

			v1cfg := mustConfig(t, `{"deploy":{"image":"agent:1"},"pool":{"pod_concurrency":4}}`)
			v2cfg := mustConfig(t, `{"deploy":{"image":"agent:2","env":{"K":"V"}},"pool":{"queue_size":0}}`)
			other := mustConfig(t, `{}`)

			put1 := mustPut(t, s, "b-scope", v1cfg)
			put2 := mustPut(t, s, "b-scope", v2cfg)
			putOther := mustPut(t, s, "a-scope", other)
			for _, c := range []struct {
				got  warmpool.StoredConfig
				cfg  warmpool.ScopeConfig
				ver  int64
				name string
			}{{put1, v1cfg, 1, "b-scope"}, {put2, v2cfg, 2, "b-scope"}, {putOther, other, 1, "a-scope"}} {
				if c.got.ScopeID != c.name || c.got.Version != c.ver || c.got.DeployVer != c.cfg.Deploy.DeployVer() || c.got.UpdatedAt.IsZero() {
					t.Errorf("Put returned %+v, want %s version %d deploy_ver %s", c.got, c.name, c.ver, c.cfg.Deploy.DeployVer())
				}
			}

			got, err := s.Get(ctx, "b-scope")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, put2) {
				t.Errorf("Get = %+v\nwant  %+v (what Put returned)", got, put2)
			}
			if got.Config.Pool.QueueSize != 0 {
				t.Errorf("explicit queue_size 0 came back as %d", got.Config.Pool.QueueSize)
			}

			list, err := s.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := []warmpool.StoredConfig{putOther, put2}; !reflect.DeepEqual(list, want) {
				t.Errorf("List = %+v\nwant   %+v", list, want)
			}

			hist, err := s.History(ctx, "b-scope")
			if err != nil {
				t.Fatal(err)
			}
			if want := []warmpool.StoredConfig{put1, put2}; !reflect.DeepEqual(hist, want) {
				t.Errorf("History = %+v\nwant      %+v", hist, want)
			}
		})
	}
}

func TestVersionsIncrementPerScope(t *testing.T) {
	s := mustOpen(t, ":memory:")
	cfg := mustConfig(t, `{}`)
	for i := int64(1); i <= 5; i++ {
		if got := mustPut(t, s, "one", cfg).Version; got != i {
			t.Fatalf("put %d of scope one: version %d", i, got)
		}
	}
	// Another scope counts from 1: versions are per scope, not global.
	if got := mustPut(t, s, "two", cfg).Version; got != 1 {
		t.Fatalf("first put of scope two: version %d, want 1", got)
	}
}

// SPEC §4: a missing memory request gets the one default and that value is what is
// stored, never a zero that one reader fills and another does not.
func TestDefaultsStoredAsGiven(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, ":memory:")
	cfg := mustConfig(t, `{"deploy":{"image":"agent:1"}}`)
	mustPut(t, s, "scope", cfg)

	got, err := s.Get(ctx, "scope")
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.Deploy.Resources.Memory != warmpool.DefaultMemory {
		t.Errorf("memory = %q, want %q", got.Config.Deploy.Resources.Memory, warmpool.DefaultMemory)
	}
	if !reflect.DeepEqual(got.Config, cfg) {
		t.Errorf("Get config = %+v, want %+v", got.Config, cfg)
	}
	// The row itself holds the value, so any other reader of the table sees it too.
	var memory string
	if err := s.db.QueryRowContext(ctx, `SELECT config_json ->> '$.deploy.resources.memory' FROM scope_versions`).Scan(&memory); err != nil {
		t.Fatal(err)
	}
	if memory != warmpool.DefaultMemory {
		t.Errorf("stored memory = %q, want %q", memory, warmpool.DefaultMemory)
	}
}

func TestPutRejectsBadScopeID(t *testing.T) {
	_, err := mustOpen(t, ":memory:").Put(context.Background(), "Bad_Scope", mustConfig(t, `{}`))
	wantCode(t, err, warmpool.CodeValidation)
}

// Rows are read back normalized: a row written before a field existed gets that
// field's default, not a zero, and a row that is not a valid config is INTERNAL (a bug
// or a hand edit), not an outage.
func TestLoadNormalizesOldRows(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, ":memory:")
	insert := func(t *testing.T, scope, doc string) {
		t.Helper()
		if _, err := s.db.ExecContext(ctx, `INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
			VALUES (?, 1, 'dv', ?, 0)`, scope, doc); err != nil {
			t.Fatal(err)
		}
	}
	insert(t, "old", `{"deploy":{"image":"agent:1","command":null},"pool":{"pod_concurrency":1}}`)
	got, err := s.Get(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	want := mustConfig(t, `{"deploy":{"image":"agent:1"},"pool":{"pod_concurrency":1}}`)
	if !reflect.DeepEqual(got.Config, want) {
		t.Fatalf("old row read as %+v\nwant %+v", got.Config, want)
	}
	if got.DeployVer != "dv" {
		t.Errorf("deploy_ver %q, want the stored dv", got.DeployVer)
	}

	insert(t, "bad", `{"deploy":{"port":0}}`)
	_, err = s.Get(ctx, "bad")
	wantCode(t, err, warmpool.CodeInternal)
	if !strings.Contains(err.Error(), "deploy.port") {
		t.Errorf("error %q does not name deploy.port", err)
	}
}

// What Get returns can be stored again unchanged: the JSON round trip keeps a
// normalised config normalised (empty lists stay empty, not nil).
func TestPutWhatGetReturned(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, ":memory:")
	mustPut(t, s, "scope", mustConfig(t, `{"deploy":{"env":{"A":"1"}}}`))
	first, err := s.Get(ctx, "scope")
	if err != nil {
		t.Fatal(err)
	}
	second := mustPut(t, s, "scope", first.Config)
	if second.Version != 2 || second.DeployVer != first.DeployVer || !reflect.DeepEqual(second.Config, first.Config) {
		t.Errorf("re-put %+v, want version 2 with the config and deploy_ver of %+v", second, first)
	}
}

func TestUnknownScope(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, ":memory:")
	_, err := s.Get(ctx, "nope")
	wantCode(t, err, warmpool.CodeScopeNotFound)
	_, err = s.History(ctx, "nope")
	wantCode(t, err, warmpool.CodeScopeNotFound)

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list == nil || len(list) != 0 {
		t.Errorf("List of an empty store = %#v, want an empty non-nil slice", list)
	}

	mustPut(t, s, "other", mustConfig(t, `{}`))
	_, err = s.Get(ctx, "nope")
	wantCode(t, err, warmpool.CodeScopeNotFound)
}

// Two replicas on one machine: two Stores (two connection pools, so SQLite file locks
// decide, as between processes) writing one scope from many goroutines. Every Put
// must succeed and the versions must be exactly 1..N, each holding the config of the
// Put that was told that version.
func TestConcurrentWritersTwoStores(t *testing.T) {
	dsn := fileDSN(t)
	stores := []*Store{mustOpen(t, dsn), mustOpen(t, dsn)}
	const goroutines, perGoroutine = 8, 15
	const n = goroutines * perGoroutine

	var (
		mu      sync.Mutex
		wrote   = map[int64]warmpool.ScopeConfig{}
		wg      sync.WaitGroup
		errs    = make(chan error, n)
		ctx     = context.Background()
		baseCfg = mustConfig(t, `{"pool":{"max_concurrency":100000,"pod_concurrency":1}}`)
	)
	for g := range goroutines {
		wg.Go(func() {
			s := stores[g%len(stores)]
			for i := range perGoroutine {
				cfg := baseCfg
				cfg.Pool.QueueSize = g*perGoroutine + i // tells the writes apart
				sc, err := s.Put(ctx, "shared", cfg)
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				if _, dup := wrote[sc.Version]; dup {
					errs <- fmt.Errorf("version %d handed out twice", sc.Version)
				}
				wrote[sc.Version] = cfg
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	hist, err := stores[0].History(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != n {
		t.Fatalf("history has %d versions, want %d", len(hist), n)
	}
	for i, sc := range hist {
		if sc.Version != int64(i+1) {
			t.Fatalf("history[%d] is version %d: gap or duplicate", i, sc.Version)
		}
		if !reflect.DeepEqual(sc.Config, wrote[sc.Version]) {
			t.Errorf("version %d holds queue_size %d, but its Put wrote %d", sc.Version, sc.Config.Pool.QueueSize, wrote[sc.Version].Pool.QueueSize)
		}
	}
}

// Env of the writer child process started by TestConcurrentWriterProcesses.
const (
	envWriterDSN = "WARMPOOL_SQLITE_TEST_WRITER_DSN"
	envWriterN   = "WARMPOOL_SQLITE_TEST_WRITER_N"
)

// TestWriterProcess is not a test on its own: TestConcurrentWriterProcesses runs the
// test binary with this test selected as a separate writer process.
func TestWriterProcess(t *testing.T) {
	dsn := os.Getenv(envWriterDSN)
	if dsn == "" {
		t.Skip("only runs as the child of TestConcurrentWriterProcesses")
	}
	n, err := strconv.Atoi(os.Getenv(envWriterN))
	if err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, dsn) // concurrent first Opens also race on the migrations
	cfg := mustConfig(t, `{}`)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n {
				sc, err := s.Put(context.Background(), "shared", cfg)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Printf("version=%d\n", sc.Version)
			}
		})
	}
	wg.Wait()
}

// Real replicas are processes: run three writer processes on one fresh file.
func TestConcurrentWriterProcesses(t *testing.T) {
	if os.Getenv(envWriterDSN) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dsn := fileDSN(t)
	const procs, perGoroutine = 3, 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWriterProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envWriterDSN+"="+dsn, envWriterN+"="+strconv.Itoa(perGoroutine))
			outs[p], errs[p] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	versionRe := regexp.MustCompile(`(?m)^version=(\d+)$`)
	var versions []int64
	for p := range procs {
		if errs[p] != nil {
			t.Fatalf("writer process %d: %v\n%s", p, errs[p], outs[p])
		}
		for _, m := range versionRe.FindAllSubmatch(outs[p], -1) {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	const n = procs * 4 * perGoroutine
	if len(versions) != n {
		t.Fatalf("got %d versions from the writers, want %d", len(versions), n)
	}
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("versions[%d] = %d: gap or duplicate (%v)", i, v, versions)
		}
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	ctx := context.Background()
	dsn := fileDSN(t)
	steps, err := migrations()
	if err != nil {
		t.Fatal(err)
	}

	// Replicas starting together on a fresh file.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	put := mustPut(t, s, "scope", mustConfig(t, `{}`))
	s.Close()

	s = mustOpen(t, dsn)
	var count int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != len(steps) {
		t.Errorf("schema_migrations has %d rows, want %d (one per migration)", count, len(steps))
	}
	if err := s.migrate(ctx); err != nil {
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

// Migrations run in name order, so a name that does not sort where it belongs would
// silently reorder the schema.
func TestMigrationNames(t *testing.T) {
	steps, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Fatal("no migrations embedded")
	}
	nameRe := regexp.MustCompile(`^(\d{4})_[a-z0-9_]+$`)
	for i, m := range steps {
		sub := nameRe.FindStringSubmatch(m.version)
		if sub == nil {
			t.Fatalf("migration %q: name must be NNNN_words.sql", m.version)
		}
		if n, _ := strconv.Atoi(sub[1]); n != i+1 {
			t.Errorf("migration %q is number %d, want %04d: numbers run 1, 2, 3 with no gap", m.version, n, i+1)
		}
	}
}

func TestClosedStore(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, fileDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "scope", mustConfig(t, `{}`))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, "scope", mustConfig(t, `{}`))
	wantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.Get(ctx, "scope")
	wantCode(t, err, warmpool.CodeStoreUnavailable)
	if !strings.Contains(err.Error(), "closed") {
		t.Errorf("error %q hides its cause", err)
	}
	_, err = s.List(ctx)
	wantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.History(ctx, "scope")
	wantCode(t, err, warmpool.CodeStoreUnavailable)
}

func TestUnopenableFile(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "missing-dir", "warmpool.db")
	_, err := Open(context.Background(), dsn)
	wantCode(t, err, warmpool.CodeStoreUnavailable)
}

func TestContextCancelledPassesThrough(t *testing.T) {
	s := mustOpen(t, ":memory:")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"put":     func() error { _, err := s.Put(ctx, "scope", mustConfig(t, `{}`)); return err },
		"get":     func() error { _, err := s.Get(ctx, "scope"); return err },
		"list":    func() error { _, err := s.List(ctx); return err },
		"history": func() error { _, err := s.History(ctx, "scope"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v is not context.Canceled", err)
			}
			if code := warmpool.ErrorCode(err); code == warmpool.CodeStoreUnavailable {
				t.Errorf("a cancelled caller reported as %s", code)
			}
		})
	}
	if _, err := Open(ctx, ":memory:"); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled ctx: %v, want context.Canceled", err)
	}
}

// A writer waiting for the lock another process holds gives up when its caller does.
func TestPutWaitingForLockHonoursContext(t *testing.T) {
	dsn := fileDSN(t)
	holder, waiter := mustOpen(t, dsn), mustOpen(t, dsn)
	tx, err := holder.db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = waiter.Put(ctx, "scope", mustConfig(t, `{}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put while another store holds the lock: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > BusyTimeout/2 {
		t.Errorf("Put waited %v, past its 200ms deadline", waited)
	}
}

func TestPragmas(t *testing.T) {
	ctx := context.Background()
	pragma := func(t *testing.T, s *Store, name string) string {
		t.Helper()
		var v string
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("defaults", func(t *testing.T) {
		s := mustOpen(t, fileDSN(t))
		for name, want := range map[string]string{"journal_mode": "wal", "busy_timeout": "5000", "foreign_keys": "1"} {
			if got := pragma(t, s, name); got != want {
				t.Errorf("PRAGMA %s = %s, want %s", name, got, want)
			}
		}
	})
	t.Run("the DSN wins", func(t *testing.T) {
		s := mustOpen(t, fileDSN(t)+"?_pragma=busy_timeout(12345)&_journal_mode=DELETE")
		if got := pragma(t, s, "busy_timeout"); got != "12345" {
			t.Errorf("busy_timeout = %s, want the DSN's 12345", got)
		}
		if got := pragma(t, s, "journal_mode"); got != "delete" {
			t.Errorf("journal_mode = %s, want the DSN's delete", got)
		}
	})
	t.Run("deferred transactions refused", func(t *testing.T) {
		if _, err := Open(ctx, fileDSN(t)+"?_txlock=deferred"); err == nil || !strings.Contains(err.Error(), "_txlock") {
			t.Errorf("Open with _txlock=deferred: %v, want an error naming _txlock", err)
		}
	})
	t.Run("empty DSN", func(t *testing.T) {
		if _, err := Open(ctx, ""); err == nil {
			t.Error("Open(\"\") succeeded")
		}
	})
}

// Every connection to ":memory:" is its own database; the store must still see one,
// also when many goroutines use it at once.
func TestMemoryIsOneDatabase(t *testing.T) {
	for _, dsn := range []string{":memory:", "file::memory:", "file:wp?mode=memory&cache=shared"} {
		t.Run(dsn, func(t *testing.T) {
			s := mustOpen(t, dsn)
			cfg := mustConfig(t, `{}`)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 5 {
						if _, err := s.Put(context.Background(), "scope", cfg); err != nil {
							t.Error(err)
							return
						}
						if _, err := s.List(context.Background()); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			hist, err := s.History(context.Background(), "scope")
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != 40 {
				t.Errorf("history has %d versions, want 40", len(hist))
			}
		})
	}
}

func TestBuildDSN(t *testing.T) {
	for _, tc := range []struct {
		dsn, want string
		memory    bool
	}{
		{"warmpool.db", "warmpool.db?_busy_timeout=5000&_foreign_keys=1&_journal_mode=WAL&_txlock=immediate", false},
		{"file:/x/wp.db?mode=rwc", "file:/x/wp.db?mode=rwc&_busy_timeout=5000&_foreign_keys=1&_journal_mode=WAL&_txlock=immediate", false},
		{"wp.db?", "wp.db?_busy_timeout=5000&_foreign_keys=1&_journal_mode=WAL&_txlock=immediate", false},
		{":memory:", ":memory:?_busy_timeout=5000&_foreign_keys=1&_txlock=immediate", true},
		{"wp.db?_fk=0&_timeout=1&_txlock=IMMEDIATE", "wp.db?_fk=0&_timeout=1&_txlock=IMMEDIATE&_journal_mode=WAL", false},
	} {
		got, memory, err := buildDSN(tc.dsn)
		if err != nil || got != tc.want || memory != tc.memory {
			t.Errorf("buildDSN(%q) = %q, %v, %v\nwant %q, %v", tc.dsn, got, memory, err, tc.want, tc.memory)
		}
	}
}

// The latest-of-every-scope query must not read every history row's config.
func TestListUsesIndex(t *testing.T) {
	s := mustOpen(t, ":memory:")
	rows, err := s.db.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+listSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Old versions may only be read through the covering index; the rows returned are
	// looked up one by one.
	var searched bool
	for _, step := range plan {
		if strings.HasPrefix(step, "SCAN scope_versions") && !strings.Contains(step, "COVERING INDEX") {
			t.Errorf("List reads every row: %q", step)
		}
		searched = searched || strings.HasPrefix(step, "SEARCH s USING INDEX")
	}
	if !searched {
		t.Errorf("List does not look the latest rows up by index:\n%s", strings.Join(plan, "\n"))
	}
}

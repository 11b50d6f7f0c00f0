package sqlite

import (
	"context"
	"database/sql"
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
	"github.com/warmpool/warmpool/internal/sqlstore"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/storetest"
)

func mustOpen(tb testing.TB, dsn string) *Store { return storetest.MustOpen(tb, Open, dsn) }

func fileDSN(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "warmpool.db")
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(tb testing.TB) storetest.Opener {
		dsn := fileDSN(tb)
		return func(tb testing.TB) warmpool.ConfigStore { return mustOpen(tb, dsn) }
	})
}

// BenchmarkHistory: history pages of 10,000 versions (docs/performance.md).
func BenchmarkHistory(b *testing.B) { storetest.BenchmarkHistory(b, mustOpen(b, fileDSN(b))) }

// The DSN forms Open takes name one database: a Put through a file: URI is what the
// plain path reads back.
func TestDSNForms(t *testing.T) {
	path := fileDSN(t)
	put := storetest.Put(t, mustOpen(t, "file:"+path+"?cache=private"), "scope", storetest.Config(t, `{}`))
	got, err := mustOpen(t, path).Get(context.Background(), "scope")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, put) {
		t.Errorf("Get through the path = %+v, want %+v", got, put)
	}
}

// The row itself holds the defaults, so any other reader of the table sees them too.
func TestStoredRowHoldsDefaults(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, ":memory:")
	storetest.Put(t, s, "scope", storetest.Config(t, `{"deploy":{"image":"agent:1"}}`))
	var memory string
	if err := s.db.QueryRowContext(ctx, `SELECT config_json ->> '$.deploy.resources.memory' FROM scope_versions`).Scan(&memory); err != nil {
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
	s := mustOpen(t, ":memory:")
	storetest.OldRows(t, s, func(t *testing.T, scope, doc string) {
		t.Helper()
		if _, err := s.db.Exec(`INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at)
			VALUES (?, 1, 'dv', ?, 0)`, scope, doc); err != nil {
			t.Fatal(err)
		}
	})
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
	cfg := storetest.Config(t, `{}`)
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
	dsn := fileDSN(t)
	storetest.Migrations(t, migrationFS, func() (*Store, error) { return Open(context.Background(), dsn) },
		func(s *Store) *sql.DB { return s.db }, (*Store).migrate)
}

func TestUnopenableFile(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "missing-dir", "warmpool.db")
	_, err := Open(context.Background(), dsn)
	storetest.WantCode(t, err, warmpool.CodeStoreUnavailable)
}

// The contract suite checks the calls; Open too gives up when its caller does.
func TestOpenHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
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
	_, err = waiter.Put(ctx, "scope", storetest.Config(t, `{}`))
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
			cfg := storetest.Config(t, `{}`)
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
			if hist := storetest.Versions(t, s, "scope"); len(hist) != 40 {
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

// plan is SQLite's query plan of query, one step a line.
func plan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}

// The latest-of-every-scope query must not read every history row's config.
func TestListUsesIndex(t *testing.T) {
	s := mustOpen(t, ":memory:")
	steps := plan(t, s, listSQL)
	// Old versions may only be read through the covering index; the rows returned are
	// looked up one by one.
	var searched bool
	for _, step := range steps {
		if strings.HasPrefix(step, "SCAN scope_versions") && !strings.Contains(step, "COVERING INDEX") {
			t.Errorf("List reads every row: %q", step)
		}
		searched = searched || strings.HasPrefix(step, "SEARCH s USING INDEX")
	}
	if !searched {
		t.Errorf("List does not look the latest rows up by index:\n%s", strings.Join(steps, "\n"))
	}
}

// A history page is one range of the primary key's index read backwards, stopped at its
// limit: no scan of the scope's rows, no sort of them.
func TestHistoryUsesIndex(t *testing.T) {
	s := mustOpen(t, ":memory:")
	steps := plan(t, s, historySQL, "scope", 100, 51)
	if len(steps) != 1 || !strings.HasPrefix(steps[0], "SEARCH scope_versions USING ") || !strings.HasSuffix(steps[0], " (scope_id=? AND version<?)") {
		t.Errorf("a history page is not one search of the primary key:\n%s", strings.Join(steps, "\n"))
	}
}

// Replicas are processes sharing one file: a follower sees the writes of writer
// processes, up to the last version they committed.
func TestFeedSeesWriterProcesses(t *testing.T) {
	if os.Getenv(envWriterDSN) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dsn := fileDSN(t)
	s := mustOpen(t, dsn)
	log := storetest.Follow(t, s, s)
	const procs, perGoroutine = 2, 5
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWriterProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envWriterDSN+"="+dsn, envWriterN+"="+strconv.Itoa(perGoroutine))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("writer process: %v\n%s", err, out)
			}
		})
	}
	wg.Wait()
	want := warmpool.ConfigChange{ScopeID: "shared", Version: procs * 4 * perGoroutine}
	await.True(t, storetest.FeedWithin, fmt.Sprintf("the feed delivers %+v", want), func() bool {
		c, ok := log.Last("shared")
		return ok && c == want
	})
}

// BenchmarkWatchConfigReads is what the watch's config reads cost at 10,000 scopes
// (docs/performance.md, issue 25): before, every scope's config read and decoded
// (List) every 30 s; after, the feed's poll with nothing new, and its read of one
// change.
func BenchmarkWatchConfigReads(b *testing.B) {
	const scopes = 10000
	ctx := context.Background()
	s := mustOpen(b, fileDSN(b))
	cfg := storetest.Config(b, `{"deploy":{"image":"registry.example/agents/support:1.4.2","env":{"OPENAI_API_KEY":"sk-0123456789abcdef0123456789abcdef","REGION":"eu-west-1","LOG_LEVEL":"info"}}}`)
	_, doc, err := sqlstore.NewVersion("bench", cfg)
	if err != nil {
		b.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range scopes {
		id := fmt.Sprintf("scope-%05d", i)
		if _, err := tx.ExecContext(ctx, `INSERT INTO scope_versions (scope_id, version, deploy_ver, config_json, created_at) VALUES (?, 1, ?, ?, 0)`,
			id, cfg.Deploy.DeployVer(), string(doc)); err != nil {
			b.Fatal(err)
		}
		if err := recordChange(ctx, tx, id, 1, false); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	head, err := s.feed.Head(ctx)
	if err != nil || head != scopes {
		b.Fatalf("head %d, %v; want %d", head, err, scopes)
	}
	took := func(ctx context.Context, changes []warmpool.ConfigChange) error { return nil }
	b.Run("list-every-config", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if all, err := s.List(ctx); err != nil || len(all) != scopes {
				b.Fatalf("%d configs, %v", len(all), err)
			}
		}
	})
	b.Run("feed-poll-idle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			seq := head
			if err := s.feed.Deliver(ctx, &seq, took); err != nil || seq != head {
				b.Fatalf("seq %d, %v", seq, err)
			}
		}
	})
	b.Run("feed-one-change", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			seq := head - 1
			if err := s.feed.Deliver(ctx, &seq, took); err != nil || seq != head {
				b.Fatalf("seq %d, %v", seq, err)
			}
		}
	})
	b.Run("get-one-config", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, "scope-05000"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Package storetest is the contract of a warmpool.ConfigStore as one test suite, which
// the tests of every store run: storetest.Run(t, newDB). What the HTTP API and the
// replicas rely on is checked here once, so the stores cannot drift apart.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Opener opens one more instance of a store on one database, with connections of its
// own, as another replica would; the instance is closed when the test ends.
type Opener func(tb testing.TB) warmpool.ConfigStore

// NewDB makes a new, empty database and returns its Opener.
type NewDB func(tb testing.TB) Opener

// Run runs the contract suite, each check as a subtest on a database of its own.
func Run(t *testing.T, newDB NewDB) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Opener)
	}{
		{"RoundTrip", testRoundTrip},
		{"VersionsPerScope", testVersionsPerScope},
		{"ListInScopeIDOrder", testListOrder},
		{"DefaultsStoredAsGiven", testDefaultsStoredAsGiven},
		{"PutRejectsBadScopeID", testPutRejectsBadScopeID},
		{"PutWhatGetReturned", testPutWhatGetReturned},
		{"UnknownScope", testUnknownScope},
		{"DeleteKeepsHistory", testDelete},
		{"HistoryPages", testHistoryPages},
		{"HistoryQueryRange", testHistoryQueryRange},
		{"HistoryPageCost", testHistoryPageCost},
		{"DeleteRacesPut", testDeleteRacesPut},
		{"OtherInstanceSeesWrites", testOtherInstanceSees},
		{"ConcurrentWritersTwoInstances", testConcurrentWriters},
		{"ClosedStore", testClosedStore},
		{"CancelledContextPassesThrough", testCancelledContext},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.test(t, newDB(t))
		})
	}
}

// MustOpen opens the store of dsn with open, fails the test on an error, and closes
// the store when the test ends.
func MustOpen[S warmpool.ConfigStore](tb testing.TB, open func(context.Context, string) (S, error), dsn string) S {
	tb.Helper()
	s, err := open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("Open: %v", err) // not the DSN: it may hold a password
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Config decodes doc the way the HTTP layer does: defaults filled, validated.
func Config(tb testing.TB, doc string) warmpool.ScopeConfig {
	tb.Helper()
	cfg, err := httpx.DecodeScopeConfig(strings.NewReader(doc))
	if err != nil {
		tb.Fatalf("DecodeScopeConfig(%s): %v", doc, err)
	}
	return cfg
}

// Put stores cfg and fails the test on an error.
func Put(tb testing.TB, s warmpool.ConfigStore, scope string, cfg warmpool.ScopeConfig) warmpool.StoredConfig {
	tb.Helper()
	sc, err := s.Put(context.Background(), scope, cfg)
	if err != nil {
		tb.Fatalf("Put(%q): %v", scope, err)
	}
	return sc
}

// Versions reads every version of a scope, page by page (the largest pages), and
// returns them oldest first; it fails the test on an error or on pages that do not
// follow one another.
func Versions(tb testing.TB, s warmpool.ConfigStore, scope string) []warmpool.StoredConfig {
	tb.Helper()
	var newest []warmpool.StoredConfig
	q := warmpool.HistoryQuery{Limit: warmpool.MaxHistoryLimit}
	for {
		page, err := s.History(context.Background(), scope, q)
		if err != nil {
			tb.Fatalf("History(%q, %+v): %v", scope, q, err)
		}
		newest = append(newest, page.Versions...)
		if page.NextBefore == 0 {
			break
		}
		if q.Before != 0 && page.NextBefore >= q.Before {
			tb.Fatalf("History(%q, %+v): next_before %d does not go back", scope, q, page.NextBefore)
		}
		q.Before = page.NextBefore
	}
	slices.Reverse(newest)
	return newest
}

// WantCode fails the test unless err carries code.
func WantCode(tb testing.TB, err error, code warmpool.Code) {
	tb.Helper()
	if got := warmpool.ErrorCode(err); got != code {
		tb.Fatalf("error %v: code %s, want %s", err, got, code)
	}
}

func testRoundTrip(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	before := time.Now().Add(-time.Second)

	v1cfg := Config(t, `{"deploy":{"image":"agent:1"},"pool":{"pod_concurrency":4}}`)
	v2cfg := Config(t, `{"deploy":{"image":"agent:2","env":{"K":"V"}},"pool":{"queue_size":0}}`)
	other := Config(t, `{}`)

	put1 := Put(t, s, "b-scope", v1cfg)
	put2 := Put(t, s, "b-scope", v2cfg)
	putOther := Put(t, s, "a-scope", other)
	after := time.Now().Add(time.Second)
	for _, c := range []struct {
		got  warmpool.StoredConfig
		cfg  warmpool.ScopeConfig
		ver  int64
		name string
	}{{put1, v1cfg, 1, "b-scope"}, {put2, v2cfg, 2, "b-scope"}, {putOther, other, 1, "a-scope"}} {
		if c.got.ScopeID != c.name || c.got.Version != c.ver || c.got.DeployVer != c.cfg.Deploy.DeployVer() {
			t.Errorf("Put returned %+v, want %s version %d deploy_ver %s", c.got, c.name, c.ver, c.cfg.Deploy.DeployVer())
		}
		if c.got.UpdatedAt.Before(before) || c.got.UpdatedAt.After(after) || c.got.UpdatedAt.Location() != time.UTC {
			t.Errorf("Put of %s version %d: updated_at %v, want the time of the Put in UTC", c.name, c.ver, c.got.UpdatedAt)
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

	hist, err := s.History(ctx, "b-scope", warmpool.HistoryQuery{Limit: warmpool.DefaultHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if want := (warmpool.HistoryPage{Versions: []warmpool.StoredConfig{put2, put1}}); !reflect.DeepEqual(hist, want) {
		t.Errorf("History = %+v\nwant      %+v", hist, want)
	}
}

func testVersionsPerScope(t *testing.T, open Opener) {
	s := open(t)
	cfg := Config(t, `{}`)
	for i := int64(1); i <= 5; i++ {
		if got := Put(t, s, "one", cfg).Version; got != i {
			t.Fatalf("put %d of scope one: version %d", i, got)
		}
	}
	// Another scope counts from 1: versions are per scope, not global.
	if got := Put(t, s, "two", cfg).Version; got != 1 {
		t.Fatalf("first put of scope two: version %d, want 1", got)
	}
}

// List is ordered by the bytes of the scope id, whatever collation the database would
// use for text by default (which may ignore punctuation).
func testListOrder(t *testing.T, open Opener) {
	s := open(t)
	ids := []string{"ab", "a.b", "b", "a0", "a-b", "a1.x"}
	for _, id := range ids {
		Put(t, s, id, Config(t, `{}`))
	}
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range list {
		got = append(got, sc.ScopeID)
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("List order %q, want %q", got, want)
	}
}

// SPEC §4: a missing memory request gets the one default and that value is what is
// stored, never a zero that one reader fills and another does not.
func testDefaultsStoredAsGiven(t *testing.T, open Opener) {
	s := open(t)
	cfg := Config(t, `{"deploy":{"image":"agent:1"}}`)
	Put(t, s, "scope", cfg)
	got, err := s.Get(context.Background(), "scope")
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.Deploy.Resources.Memory != warmpool.DefaultMemory {
		t.Errorf("memory = %q, want %q", got.Config.Deploy.Resources.Memory, warmpool.DefaultMemory)
	}
	if !reflect.DeepEqual(got.Config, cfg) {
		t.Errorf("Get config = %+v, want %+v", got.Config, cfg)
	}
}

func testPutRejectsBadScopeID(t *testing.T, open Opener) {
	s := open(t)
	_, err := s.Put(context.Background(), "Bad_Scope", Config(t, `{}`))
	WantCode(t, err, warmpool.CodeValidation)
	if got := Put(t, s, "scope", Config(t, `{}`)).Version; got != 1 {
		t.Errorf("first valid Put got version %d: a refused Put used up a version", got)
	}
}

// What Get returns can be stored again unchanged: the JSON round trip keeps a
// normalised config normalised (empty lists stay empty, not nil).
func testPutWhatGetReturned(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	Put(t, s, "scope", Config(t, `{"deploy":{"env":{"A":"1"}}}`))
	first, err := s.Get(ctx, "scope")
	if err != nil {
		t.Fatal(err)
	}
	second := Put(t, s, "scope", first.Config)
	if second.Version != 2 || second.DeployVer != first.DeployVer || !reflect.DeepEqual(second.Config, first.Config) {
		t.Errorf("re-put %+v, want version 2 with the config and deploy_ver of %+v", second, first)
	}
}

func testUnknownScope(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	_, err := s.Get(ctx, "nope")
	WantCode(t, err, warmpool.CodeScopeNotFound)
	for _, q := range []warmpool.HistoryQuery{{Limit: 1}, {Before: 5, Limit: 1}} {
		_, err = s.History(ctx, "nope", q)
		WantCode(t, err, warmpool.CodeScopeNotFound)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list == nil || len(list) != 0 {
		t.Errorf("List of an empty store = %#v, want an empty non-nil slice", list)
	}

	Put(t, s, "other", Config(t, `{}`))
	_, err = s.Get(ctx, "nope")
	WantCode(t, err, warmpool.CodeScopeNotFound)
	_, err = s.Delete(ctx, "nope")
	WantCode(t, err, warmpool.CodeScopeNotFound)
}

// A deleted scope is gone from Get and List, on every instance, while its history
// stays; deleting it again is SCOPE_NOT_FOUND; the next Put makes it live again at the
// next version.
func testDelete(t *testing.T, open Opener) {
	ctx := context.Background()
	s, other := open(t), open(t)
	Put(t, s, "scope", Config(t, `{}`))
	v2 := Put(t, s, "scope", Config(t, `{"pool":{"max_concurrency":4}}`))
	Put(t, s, "kept", Config(t, `{}`))

	got, err := s.Delete(ctx, "scope")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v2) {
		t.Errorf("Delete = %+v, want the latest version %+v", got, v2)
	}
	for name, st := range map[string]warmpool.ConfigStore{"same": s, "other": other} {
		_, err = st.Get(ctx, "scope")
		WantCode(t, err, warmpool.CodeScopeNotFound)
		list, err := st.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ScopeID != "kept" {
			t.Errorf("%s instance: List after the delete = %+v, want only kept", name, list)
		}
		hist := Versions(t, st, "scope")
		if len(hist) != 2 || hist[1].Version != 2 {
			t.Errorf("%s instance: History after the delete has %d versions, want both", name, len(hist))
		}
	}
	_, err = other.Delete(ctx, "scope")
	WantCode(t, err, warmpool.CodeScopeNotFound)

	v3 := Put(t, other, "scope", Config(t, `{}`))
	if v3.Version != 3 {
		t.Errorf("Put after the delete: version %d, want 3", v3.Version)
	}
	if got, err := s.Get(ctx, "scope"); err != nil || got.Version != 3 {
		t.Errorf("Get after the new Put = v%d, %v; want v3", got.Version, err)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 2 {
		t.Errorf("List after the new Put = %+v, %v; want kept and scope", list, err)
	}
	if got, err := s.Delete(ctx, "scope"); err != nil || got.Version != 3 {
		t.Errorf("second delete = v%d, %v; want v3", got.Version, err)
	}
	_, err = s.Get(ctx, "scope")
	WantCode(t, err, warmpool.CodeScopeNotFound)
}

// History comes in pages, newest first: 120 versions in pages of 50 are 50, 50 and
// 20, each page's next_before the Before of the next, the last without one; a page
// reaches back from any version, and past the oldest it is empty, not an error.
func testHistoryPages(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	const n = 120
	puts := make([]warmpool.StoredConfig, n+1) // by version
	for v := 1; v <= n; v++ {
		puts[v] = Put(t, s, "scope", Config(t, fmt.Sprintf(`{"pool":{"queue_size":%d}}`, v)))
	}
	Put(t, s, "other", Config(t, `{}`))
	// want is the page of versions from, from-1, ... down to to, newest first.
	want := func(from, to int) []warmpool.StoredConfig {
		var out []warmpool.StoredConfig
		for v := from; v >= to; v-- {
			out = append(out, puts[v])
		}
		return out
	}
	for _, c := range []struct {
		q    warmpool.HistoryQuery
		want warmpool.HistoryPage
	}{
		{warmpool.HistoryQuery{Limit: 50}, warmpool.HistoryPage{Versions: want(120, 71), NextBefore: 71}},
		{warmpool.HistoryQuery{Before: 71, Limit: 50}, warmpool.HistoryPage{Versions: want(70, 21), NextBefore: 21}},
		{warmpool.HistoryQuery{Before: 21, Limit: 50}, warmpool.HistoryPage{Versions: want(20, 1)}},
		// A page that ends at the oldest version says no more, also when it is full.
		{warmpool.HistoryQuery{Before: 21, Limit: 20}, warmpool.HistoryPage{Versions: want(20, 1)}},
		{warmpool.HistoryQuery{Limit: n}, warmpool.HistoryPage{Versions: want(120, 1)}},
		{warmpool.HistoryQuery{Limit: warmpool.MaxHistoryLimit}, warmpool.HistoryPage{Versions: want(120, 1)}},
		{warmpool.HistoryQuery{Limit: 1}, warmpool.HistoryPage{Versions: want(120, 120), NextBefore: 120}},
		{warmpool.HistoryQuery{Before: 1000, Limit: 2}, warmpool.HistoryPage{Versions: want(120, 119), NextBefore: 119}},
		{warmpool.HistoryQuery{Before: 2, Limit: 50}, warmpool.HistoryPage{Versions: want(1, 1)}},
		{warmpool.HistoryQuery{Before: 1, Limit: 50}, warmpool.HistoryPage{Versions: []warmpool.StoredConfig{}}},
	} {
		got, err := s.History(ctx, "scope", c.q)
		if err != nil {
			t.Fatalf("History(%+v): %v", c.q, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("History(%+v) = %d versions %s, next_before %d\nwant %d versions %s, next_before %d", c.q,
				len(got.Versions), span(got.Versions), got.NextBefore, len(c.want.Versions), span(c.want.Versions), c.want.NextBefore)
		}
	}

	// A deleted scope's history pages on.
	if _, err := s.Delete(ctx, "scope"); err != nil {
		t.Fatal(err)
	}
	got, err := s.History(ctx, "scope", warmpool.HistoryQuery{Before: 100, Limit: 3})
	if err != nil || !reflect.DeepEqual(got, warmpool.HistoryPage{Versions: want(99, 97), NextBefore: 97}) {
		t.Errorf("History of the deleted scope = %s next_before %d, %v; want v99..v97 next_before 97", span(got.Versions), got.NextBefore, err)
	}
}

// span names a page's versions, newest and oldest ("v120..v71").
func span(versions []warmpool.StoredConfig) string {
	if len(versions) == 0 {
		return "none"
	}
	return fmt.Sprintf("v%d..v%d", versions[0].Version, versions[len(versions)-1].Version)
}

// A page out of range is VALIDATION naming the parameter, on a known scope and an
// unknown one alike.
func testHistoryQueryRange(t *testing.T, open Opener) {
	s := open(t)
	Put(t, s, "scope", Config(t, `{}`))
	for _, c := range []struct {
		q     warmpool.HistoryQuery
		param string
	}{
		{warmpool.HistoryQuery{}, "limit"},
		{warmpool.HistoryQuery{Limit: -1}, "limit"},
		{warmpool.HistoryQuery{Limit: warmpool.MaxHistoryLimit + 1}, "limit"},
		{warmpool.HistoryQuery{Before: -1, Limit: 1}, "before"},
	} {
		for _, scope := range []string{"scope", "nope"} {
			_, err := s.History(context.Background(), scope, c.q)
			var e *warmpool.Error
			if !errors.As(err, &e) || e.Code != warmpool.CodeValidation || !strings.HasPrefix(e.Message, c.param+":") {
				t.Errorf("History(%q, %+v) = %v, want VALIDATION naming %s", scope, c.q, err, c.param)
			}
		}
	}
}

// A page costs what it holds, not what the history holds: the newest 50 of 1,500
// versions take about as long as the newest 50 of 60 (the best of several tries of
// each, taken in turns so that the machine's load falls on both). A store that reads
// the whole history for a page takes some 25 times as long.
func testHistoryPageCost(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	cfg := Config(t, `{"deploy":{"image":"agent:1","env":{"OPENAI_API_KEY":"sk-0123456789abcdef0123456789abcdef","REGION":"eu-west-1"}}}`)
	const small, big = 60, 1500
	for range small {
		Put(t, s, "small", cfg)
	}
	for range big {
		Put(t, s, "big", cfg)
	}
	page := func(scope string) time.Duration {
		t.Helper()
		start := time.Now()
		got, err := s.History(ctx, scope, warmpool.HistoryQuery{Limit: 50})
		took := time.Since(start)
		if err != nil || len(got.Versions) != 50 || got.NextBefore == 0 {
			t.Fatalf("History(%q): %d versions, next_before %d, %v", scope, len(got.Versions), got.NextBefore, err)
		}
		return took
	}
	bestSmall, bestBig := time.Hour, time.Hour
	for range 15 {
		bestSmall, bestBig = min(bestSmall, page("small")), min(bestBig, page("big"))
	}
	t.Logf("a page of 50: %v of %d versions, %v of %d", bestSmall, small, bestBig, big)
	if bestBig > 4*bestSmall+time.Millisecond {
		t.Errorf("a page of 50 of %d versions took %v, of %d versions %v: the page's cost grows with the history", big, bestBig, small, bestSmall)
	}
}

// Deletes and Puts of one scope through two instances at once: each Put is a new
// version, every Delete that succeeds deleted the latest version at its time, and the
// scope ends live exactly when the last write was a Put.
func testDeleteRacesPut(t *testing.T, open Opener) {
	ctx := context.Background()
	a, b := open(t), open(t)
	Put(t, a, "scope", Config(t, `{}`))
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	var deleted []int64
	for i := range n {
		wg.Go(func() {
			st := a
			if i%2 == 1 {
				st = b
			}
			if _, err := st.Put(ctx, "scope", Config(t, `{}`)); err != nil {
				t.Error(err)
			}
			sc, err := st.Delete(ctx, "scope")
			if err != nil && warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				deleted = append(deleted, sc.Version)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	hist := Versions(t, a, "scope")
	if len(hist) != n+1 {
		t.Fatalf("History has %d versions, want %d", len(hist), n+1)
	}
	if len(deleted) == 0 || slices.Contains(deleted, 0) {
		t.Fatalf("deletes returned %v: want at least one, each a version", deleted)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(deleted)))) != len(deleted) {
		t.Errorf("one version deleted twice: %v", deleted)
	}
	// Every goroutine deleted after its own Put, so the last write was a delete.
	if _, err := a.Get(ctx, "scope"); warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		t.Errorf("after the race Get = %v, want SCOPE_NOT_FOUND", err)
	}
}

// A config PUT on one replica is what every other replica reads next: no cache
// between a store and its database.
func testOtherInstanceSees(t *testing.T, open Opener) {
	ctx := context.Background()
	a, b := open(t), open(t)
	for i := range 3 {
		cfg := Config(t, fmt.Sprintf(`{"deploy":{"image":"agent:%d"}}`, i))
		put := Put(t, a, "scope", cfg)
		got, err := b.Get(ctx, "scope")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, put) {
			t.Fatalf("other instance's Get = %+v, want %+v", got, put)
		}
		list, err := b.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || !reflect.DeepEqual(list[0], put) {
			t.Fatalf("other instance's List = %+v, want [%+v]", list, put)
		}
	}
}

// Two replicas: two instances (two connection pools, so the database decides, as
// between processes) writing one scope from many goroutines at once. Every Put must
// succeed and the versions must be exactly 1..N, each holding the config of the Put
// that was told that version: no update lost, none numbered twice.
func testConcurrentWriters(t *testing.T, open Opener) {
	stores := []warmpool.ConfigStore{open(t), open(t)}
	const goroutines, perGoroutine = 8, 15
	const n = goroutines * perGoroutine

	var (
		mu      sync.Mutex
		wrote   = map[int64]warmpool.ScopeConfig{}
		wg      sync.WaitGroup
		errs    = make(chan error, n)
		ctx     = context.Background()
		baseCfg = Config(t, `{"pool":{"max_concurrency":100000,"pod_concurrency":1}}`)
		start   = make(chan struct{})
	)
	for g := range goroutines {
		wg.Go(func() {
			s := stores[g%len(stores)]
			<-start
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
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	hist := Versions(t, stores[1], "shared")
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
	latest, err := stores[0].Get(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version != n {
		t.Errorf("Get after the writers: version %d, want %d", latest.Version, n)
	}
}

func testClosedStore(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	Put(t, s, "scope", Config(t, `{}`))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(ctx, "scope", Config(t, `{}`))
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.Get(ctx, "scope")
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	if !strings.Contains(err.Error(), "closed") {
		t.Errorf("error %q hides its cause", err)
	}
	_, err = s.List(ctx)
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.History(ctx, "scope", warmpool.HistoryQuery{Limit: 1})
	WantCode(t, err, warmpool.CodeStoreUnavailable)
	_, err = s.Delete(ctx, "scope")
	WantCode(t, err, warmpool.CodeStoreUnavailable)
}

// A caller that gave up is not an outage: its cancellation comes back as ctx.Err(),
// not as STORE_UNAVAILABLE.
func testCancelledContext(t *testing.T, open Opener) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"put":     func() error { _, err := s.Put(ctx, "scope", Config(t, `{}`)); return err },
		"get":     func() error { _, err := s.Get(ctx, "scope"); return err },
		"list":    func() error { _, err := s.List(ctx); return err },
		"history": func() error { _, err := s.History(ctx, "scope", warmpool.HistoryQuery{Limit: 1}); return err },
		"delete":  func() error { _, err := s.Delete(ctx, "scope"); return err },
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
}

// BenchmarkHistory measures history pages of a scope with 10,000 versions, each with
// the env of a real agent: the newest page and one deep in the history, each of the
// default 50 versions and of the largest 500. It reports the size of the page as the
// HTTP API answers it (resp-bytes).
func BenchmarkHistory(b *testing.B, s warmpool.ConfigStore) {
	const versions = 10000
	cfg := Config(b, `{"deploy":{"image":"registry.example/agents/support:1.4.2","env":{"OPENAI_API_KEY":"sk-0123456789abcdef0123456789abcdef","REGION":"eu-west-1","LOG_LEVEL":"info"}}}`)
	for range versions {
		Put(b, s, "bench", cfg)
	}
	for _, c := range []struct {
		name string
		q    warmpool.HistoryQuery
	}{
		{"newest-50", warmpool.HistoryQuery{Limit: warmpool.DefaultHistoryLimit}},
		{"deep-50", warmpool.HistoryQuery{Before: 100, Limit: warmpool.DefaultHistoryLimit}},
		{"newest-500", warmpool.HistoryQuery{Limit: warmpool.MaxHistoryLimit}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var page warmpool.HistoryPage
			for b.Loop() {
				var err error
				if page, err = s.History(context.Background(), "bench", c.q); err != nil {
					b.Fatal(err)
				}
			}
			raw, err := json.Marshal(map[string]any{"scope_id": "bench", "versions": page.Versions, "next_before": page.NextBefore})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(raw)), "resp-bytes")
		})
	}
}

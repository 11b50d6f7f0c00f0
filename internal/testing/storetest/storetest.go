// Package storetest is the contract of a warmpool.ConfigStore as one test suite, which
// the tests of every store run: storetest.Run(t, newDB). What the HTTP API and the
// replicas rely on is checked here once, so the stores cannot drift apart.
package storetest

import (
	"context"
	"reflect"
	"slices"
	"strings"
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
	for _, c := range append([]struct {
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
		{"FeedSeesWrites", testFeedSeesWrites},
		{"FeedRedeliversFailed", testFeedRedeliversFailed},
	}, tenantTests...) {
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

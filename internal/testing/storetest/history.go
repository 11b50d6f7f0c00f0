package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

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
